"""The rate-limit failure, re-enacted from the cassettes shipped with the example."""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from pricing_standin import ERROR_BODY_LIMIT, PRICES, PricingAPI
from rate_limit import prices, run

import agenttape

QUOTED = re.compile(r"EUR \d+\.\d\d")


def assert_quotes_only_prices_the_api_gave(parse: prices.Parser) -> None:
    """The regression test built on the recorded peak run: the pricing API gave no price, so
    the agent must quote none."""
    with agenttape.use_cassette(run.PEAK_CASSETTE) as tape:
        reply = run.agent.answer(
            run.llm_client(), f"http://127.0.0.1:{run.PRICES_PORT}", run.QUESTION, parse
        )
    assert tape.interactions[1].response is not None
    assert tape.interactions[1].response.status == 429
    assert QUOTED.findall(reply) == [], f"quoted a price the API never gave: {reply!r}"
    assert "busy" in reply


def test_regression_test_passes_on_the_fixed_parser() -> None:
    assert_quotes_only_prices_the_api_gave(prices.parse_price_fixed)


def test_regression_test_fails_on_the_shipped_parser() -> None:
    with pytest.raises(AssertionError, match=r"EUR 120\.00") as failure:
        assert_quotes_only_prices_the_api_gave(prices.parse_price)
    assert failure.type is AssertionError  # the assertion, not a cassette miss


def test_shipped_cassette_reenacts_the_wrong_price_every_time() -> None:
    shipped = hashlib.sha256(run.PEAK_CASSETTE.read_bytes()).hexdigest()
    replies = {run.replay_peak() for _ in range(3)}
    assert replies == {"Here is what I found: sku KTL-100, price EUR 120.00."}
    assert hashlib.sha256(run.PEAK_CASSETTE.read_bytes()).hexdigest() == shipped


def test_recorded_once_then_replayed_with_the_standins_stopped(tmp_path: Path) -> None:
    path = tmp_path / "peak.msgpack"
    live, llm_port, prices_port = run.record_peak(path, llm_port=0, prices_port=0)
    # Both stand-ins are stopped now: every replay below is served from the file.
    replays = [run.replay_peak(path, llm_port=llm_port, prices_port=prices_port) for _ in range(5)]
    assert replays == [live] * 5
    assert "EUR 120.00" in live

    tape = agenttape.load(path)
    assert [i.response.status for i in tape.interactions if i.response] == [200, 429, 200]
    limited = tape.interactions[1].response
    assert limited is not None
    assert ("retry-after", "30") in limited.headers
    assert len(limited.body) == ERROR_BODY_LIMIT
    assert limited.body.startswith(b'{"error": {"type": "rate_limited", "limit_per_minute": 120')
    with pytest.raises(ValueError):
        json.loads(limited.body)  # kept as the half-JSON bytes it was


def test_shipped_cassettes_are_what_the_standins_answer(tmp_path: Path) -> None:
    """Recording again from the stand-ins gives the shipped cassettes' bodies, byte for byte."""
    peak, retry = tmp_path / "peak.msgpack", tmp_path / "retry.msgpack"
    run.record_peak(peak, llm_port=0, prices_port=0)
    run.record_retry(retry, port=0)
    for fresh_path, shipped_path in ((peak, run.PEAK_CASSETTE), (retry, run.RETRY_CASSETTE)):
        fresh, shipped = agenttape.load(fresh_path), agenttape.load(shipped_path)
        for new, old in zip(fresh.interactions, shipped.interactions, strict=True):
            assert new.request.body == old.request.body
            assert new.response is not None and old.response is not None
            assert (new.response.status, new.response.body) == (
                old.response.status,
                old.response.body,
            )
        assert shipped.metadata["tags"] == run.TAGS


def test_anthropic_429_retry_200_replays_through_the_sdk_retry() -> None:
    reply, _, served = run.replay_retry()
    assert served == [429, 200]
    assert reply.startswith("Thank you for your message!")
    tape = agenttape.load(run.RETRY_CASSETTE)
    limited = tape.interactions[0].response
    assert limited is not None and ("retry-after", "1") in limited.headers


def test_both_parsers_read_the_real_price_off_peak() -> None:
    with PricingAPI() as api:
        for sku, listed in PRICES.items():
            expected = {"sku": sku, "price": f"EUR {Decimal(listed['price']):.2f}"}
            assert prices.fetch_price(api.url, sku, prices.parse_price) == expected
            assert prices.fetch_price(api.url, sku, prices.parse_price_fixed) == expected


def test_fixed_parser_refuses_an_answer_that_is_not_a_price() -> None:
    with PricingAPI() as api, pytest.raises(prices.PriceUnavailable):
        prices.fetch_price(api.url, "NOPE-1", prices.parse_price_fixed)
