"""fast_retries: the SDKs' own retry code runs on replay, and the wait it computes is skipped.

No wall-clock assertion: the SDKs log the wait they are about to sleep ("Retrying request in
1.000000 seconds"), which shows both that their retry path ran and how long it slept.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from llm_standin import StandIn

import agenttape
from tests.servers import refused_port

MESSAGES = [{"role": "user", "content": "Where is my order?"}]


def _waits(caplog: pytest.LogCaptureFixture, logger: str) -> list[float]:
    """The retry waits the SDK computed and passed to its sleep, in order."""
    waits = [
        float(match.group(1))
        for record in caplog.records
        if record.name == logger
        and (
            match := re.match(
                r"Retrying request (?:to \S+ )?in ([0-9.]+) seconds", record.getMessage()
            )
        )
    ]
    caplog.clear()
    return waits


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=2)


def _chat(client: openai.OpenAI) -> str | None:
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    return reply.choices[0].message.content


def assert_retry_wait_skipped(
    ask: Callable[[str], Any], cassette_path: Path, log: pytest.LogCaptureFixture, logger: str
) -> None:
    """A 429 (retry-after: 1) then 200: recorded with the SDK's full wait, replayed offline
    with the same answer and a wait of zero."""
    with StandIn(rate_limit_first=1, retry_after="1") as api:
        with agenttape.use_cassette(cassette_path, mode="once"):
            live = ask(api.url)
        url = api.url
    assert _waits(log, logger) == [1.0]
    with agenttape.use_cassette(cassette_path) as replay:
        assert ask(url) == live
    assert replay.all_played
    assert _waits(log, logger) == [0.0]


async def assert_async_retry_wait_skipped(
    ask: Callable[[str], Awaitable[Any]],
    cassette_path: Path,
    log: pytest.LogCaptureFixture,
    logger: str,
) -> None:
    """``assert_retry_wait_skipped`` for an async client."""
    with StandIn(rate_limit_first=1, retry_after="1") as api:
        async with agenttape.use_cassette(cassette_path, mode="once"):
            live = await ask(api.url)
        url = api.url
    assert _waits(log, logger) == [1.0]
    async with agenttape.use_cassette(cassette_path) as replay:
        assert await ask(url) == live
    assert replay.all_played
    assert _waits(log, logger) == [0.0]


def text_of(message: Any) -> str:
    """The text of an Anthropic message's single text block."""
    block = message.content[0]
    assert block.type == "text"
    return str(block.text)


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="openai._base_client")
    caplog.set_level(logging.INFO, logger="anthropic._base_client")
    return caplog


def test_openai_429_then_200_replays_without_the_wait(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    sleep = time.sleep
    with StandIn(rate_limit_first=1, retry_after="1") as api:
        with agenttape.use_cassette(cassette_path, mode="once"):
            live = _chat(_openai(api.url))
        url = api.url
    assert _waits(log, "openai._base_client") == [1.0]  # recording waits as the server asked

    tape = agenttape.load(cassette_path)
    assert [i.response.status for i in tape.interactions if i.response] == [429, 200]
    retry = tape.interactions[1].request.header("x-stainless-retry-count")
    assert retry == "1" or (retry is None and openai.__version__.startswith("1."))  # 1.0 had none

    with agenttape.use_cassette(cassette_path) as replay:  # the stand-in is stopped: offline
        assert time.sleep is sleep  # nothing global was replaced
        assert _chat(_openai(url)) == live
    assert replay.all_played
    assert _waits(log, "openai._base_client") == [0.0]  # the SDK retried, and did not wait


def test_fast_retries_off_keeps_the_recorded_wait(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    with StandIn(rate_limit_first=1, retry_after="1") as api:
        with agenttape.use_cassette(cassette_path, mode="once"):
            _chat(_openai(api.url))
        url = api.url
    _waits(log, "openai._base_client")
    with agenttape.use_cassette(cassette_path, fast_retries=False) as replay:
        _chat(_openai(url))
    assert replay.all_played
    assert _waits(log, "openai._base_client") == [1.0]


async def test_anthropic_async_429_then_200_replays_without_the_wait(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    async def ask(url: str) -> str:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=2)
        message = await client.messages.create(
            model="claude-opus-4-6",
            max_tokens=64,
            messages=MESSAGES,  # type: ignore[arg-type]
        )
        return text_of(message)

    await assert_async_retry_wait_skipped(ask, cassette_path, log, "anthropic._base_client")


def test_replayed_connection_errors_are_retried_without_backoff(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{refused_port()}/v1", api_key="sk-test", max_retries=1
    )
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        pytest.raises(openai.APIConnectionError),
    ):
        _chat(client)
    recorded = _waits(log, "openai._base_client")
    assert len(recorded) == 1 and recorded[0] > 0  # exponential backoff, with jitter
    assert [i.error.kind for i in agenttape.load(cassette_path).interactions if i.error] == [
        "connect_error",
        "connect_error",
    ]
    with agenttape.use_cassette(cassette_path), pytest.raises(openai.APIConnectionError):
        _chat(client)
    assert _waits(log, "openai._base_client") == [0.0]


def test_recording_a_live_retry_is_never_shortened(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    """new_episodes: the 429 is recorded now, so the SDK waits as the server asked."""
    with (
        StandIn(rate_limit_first=1, retry_after="1") as api,
        agenttape.use_cassette(cassette_path, mode="new_episodes"),
    ):
        _chat(_openai(api.url))
    assert _waits(log, "openai._base_client") == [1.0]


async def test_openai_async_client_replays_without_the_wait(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    async def ask(url: str) -> str | None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=2)
        reply = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        return reply.choices[0].message.content

    await assert_async_retry_wait_skipped(ask, cassette_path, log, "openai._base_client")


def test_anthropic_sync_client_replays_without_the_wait(
    cassette_path: Path, log: pytest.LogCaptureFixture
) -> None:
    def ask(url: str) -> str:
        client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=2)
        message = client.messages.create(
            model="claude-opus-4-6",
            max_tokens=64,
            messages=MESSAGES,  # type: ignore[arg-type]
        )
        return text_of(message)

    assert_retry_wait_skipped(ask, cassette_path, log, "anthropic._base_client")
