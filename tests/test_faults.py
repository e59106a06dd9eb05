"""Faults (SPEC §18): which requests a fault fires on, and that an injected interaction is
stored as injected, never as something the service did."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agenttape
from agenttape._core.codec import decode, encode
from agenttape._core.faults import FaultPlan, fault_from_json, fault_to_json
from agenttape._core.models import Interaction, Request, Response

CHAT = "https://api.openai.com/v1/chat/completions"


def post(url: str = CHAT) -> Request:
    return Request("POST", url, [], b"{}")


def fires(plan: FaultPlan, requests: list[Request]) -> list[bool]:
    return [plan.pick(request, None) is not None for request in requests]


def test_nth_fires_on_the_nth_matching_request_only() -> None:
    plan = FaultPlan([agenttape.fault("rate_limit", on="POST /v1/chat/completions", nth=2)])
    other = post("https://api.openai.com/v1/embeddings")
    assert fires(plan, [post(), other, post(), post()]) == [False, False, True, False]
    assert [(f.method, f.url) for f in plan.fired] == [("POST", CHAT)]
    assert plan.unfired() == []


def test_every_and_times_limit_the_fires() -> None:
    plan = FaultPlan([agenttape.fault("server_error", every=2, times=2)])
    assert fires(plan, [post()] * 7) == [False, True, False, True, False, False, False]


def test_nth_with_every_fires_from_the_nth_on() -> None:
    plan = FaultPlan([agenttape.fault("reset", nth=2, every=3)])
    assert fires(plan, [post()] * 8) == [False, True, False, False, True, False, False, True]


def test_without_a_selector_every_matching_request_fires() -> None:
    plan = FaultPlan([agenttape.fault("timeout", host="api.search.example")])
    search = Request("GET", "https://api.search.example/q?x=1")
    assert fires(plan, [search, post(), search]) == [True, False, True]


@pytest.mark.parametrize(
    ("pattern", "url", "method", "expected"),
    [
        ("POST /v1/chat/completions", CHAT, "POST", True),
        ("GET /v1/chat/completions", CHAT, "POST", False),
        ("* /v1/chat/*", CHAT, "GET", True),
        ("api.openai.com/v1/*", CHAT, "POST", True),
        ("*.openai.com/v1/chat/completions", CHAT, "POST", True),
        ("api.anthropic.com/*", CHAT, "POST", False),
        ("/v1/chat/completions", CHAT + "?stream=1", "POST", True),
        ("/v1/search?q=*", "https://h.example/v1/search?q=cats", "GET", True),
        ("/v1/search?q=dogs", "https://h.example/v1/search?q=cats", "GET", False),
        ("127.0.0.1:8080/v1/*", "http://127.0.0.1:8080/v1/x", "GET", True),
        ("127.0.0.1/v1/*", "http://127.0.0.1:8080/v1/x", "GET", True),
        ("https://api.openai.com/v1/*", CHAT, "POST", True),
        ("POST", CHAT, "POST", True),
        ("POST", CHAT, "GET", False),
    ],
)
def test_request_patterns(pattern: str, url: str, method: str, expected: bool) -> None:
    item = agenttape.fault("status", on=pattern, status=418)
    assert item.matches(Request(method, url), None) is expected


def test_index_selects_the_interaction_of_the_cassette() -> None:
    plan = FaultPlan([agenttape.fault("reset", index=1)])
    assert [plan.pick(post(), i) is not None for i in (0, 1, None, 1)] == [
        False,
        True,
        False,
        True,
    ]


def test_probability_is_the_same_in_every_process() -> None:
    def decisions() -> list[bool]:
        plan = FaultPlan([agenttape.fault("reset", probability=0.3, seed=7)])
        urls = [f"https://tool.example/{n % 5}" for n in range(200)]
        return fires(plan, [Request("GET", url) for url in urls])

    here = decisions()
    code = (
        "import agenttape\n"
        "from agenttape._core.faults import FaultPlan\n"
        "from agenttape._core.models import Request\n"
        "plan = FaultPlan([agenttape.fault('reset', probability=0.3, seed=7)])\n"
        "print(''.join('1' if plan.pick(Request('GET', f'https://tool.example/{n % 5}'), None)"
        " else '0' for n in range(200)))\n"
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    ).stdout.strip()
    assert "".join("1" if fired else "0" for fired in here) == elsewhere
    assert 40 <= sum(here) <= 80  # about 30 % of 200
    other_seed = FaultPlan([agenttape.fault("reset", probability=0.3, seed=8)])
    urls = [f"https://tool.example/{n % 5}" for n in range(200)]
    assert fires(other_seed, [Request("GET", url) for url in urls]) != here


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: agenttape.fault("ratelimit"), ValueError),
        (lambda: agenttape.fault("rate_limit", after_chunks=2), TypeError),
        (lambda: agenttape.fault("status"), TypeError),
        (lambda: agenttape.fault("rate_limit", nth=0), ValueError),
        (lambda: agenttape.fault("rate_limit", probability=1.5), ValueError),
        (lambda: agenttape.fault("rate_limit", retry_after="3"), TypeError),
        (lambda: agenttape.fault("rate_limit", provider="acme"), ValueError),
        (lambda: agenttape.fault("rate_limit", on="POST a b"), ValueError),
        (lambda: agenttape.fault("cut_stream", after_chunks=1, after_bytes=5), TypeError),
    ],
)
def test_mistakes_are_errors_where_the_fault_is_written(call: object, error: type) -> None:
    with pytest.raises(error):
        call()  # type: ignore[operator]


def test_json_form_round_trips() -> None:
    item = agenttape.fault("rate_limit", on="POST /v1/messages", nth=2, retry_after=30)
    assert fault_to_json(item) == {
        "kind": "rate_limit",
        "on": "POST /v1/messages",
        "nth": 2,
        "retry_after": 30,
    }
    assert fault_from_json(fault_to_json(item)) == item
    with pytest.raises(TypeError):
        fault_from_json({"on": "POST /v1/messages"})


def test_describe_names_kind_options_and_selectors() -> None:
    item = agenttape.fault("rate_limit", on="POST /v1/chat/completions", nth=2, retry_after=3)
    assert item.describe() == "rate_limit(retry_after=3) on POST /v1/chat/completions, nth=2"
    assert agenttape.fault("reset").describe() == "reset"


def test_injected_is_stored_and_read_back() -> None:
    injected = Interaction(
        post(), Response(429, body=b"{}"), injected="rate_limit on POST /v1/chat/completions"
    )
    real = Interaction(post(), Response(200, body=b"{}"))
    _header, (first, second) = decode(encode({}, [injected, real]), "x.msgpack")
    assert first.injected == "rate_limit on POST /v1/chat/completions"
    assert second.injected is None
