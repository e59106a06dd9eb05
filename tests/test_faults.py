"""Faults (SPEC §18): which requests a fault fires on, and that an injected interaction is
stored as injected, never as something the service did."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._core.faults import FaultPlan, fault_from_json, fault_to_json
from agenttape._core.models import Interaction, Request, Response
from agenttape._core.wire.codec import decode, encode
from tests.servers import Seen, Server, json_reply

pytest_plugins = ["pytester"]

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


# -- in a cassette: replayed and live -------------------------------------------------------


def counting_app(counter: list[str]) -> Callable[[Seen], Any]:
    def app(seen: Seen) -> Any:
        counter.append(seen.path)
        return json_reply({"path": seen.path, "n": len(counter)})

    return app


@pytest.fixture
def api(serve: Callable[..., Server]) -> tuple[Server, list[str]]:
    seen: list[str] = []
    return serve(counting_app(seen)), seen


def record(path: Path, url: str, *paths: str) -> list[Any]:
    with agenttape.use_cassette(path, mode="once"):
        return [httpx.get(url + p).json() for p in paths]


def test_an_answer_in_the_recorded_ones_place_leaves_it_for_the_retry(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    server, _seen = api
    live = record(cassette_path, server.url, "/a", "/b")
    server.stop()
    item = agenttape.fault("server_error", on="GET /a", times=1)
    with agenttape.use_cassette(cassette_path, faults=[item]) as tape:
        first = httpx.get(server.url + "/a")
        again = httpx.get(server.url + "/a")
        other = httpx.get(server.url + "/b")
    assert first.status_code == 500
    assert [again.json(), other.json()] == live
    assert tape.all_played
    assert [(f.method, f.url, f.index) for f in tape.faults_fired] == [
        ("GET", server.url + "/a", 0)
    ]


def test_index_selects_a_recorded_interaction(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    server, _seen = api
    record(cassette_path, server.url, "/a", "/b")
    server.stop()
    with agenttape.use_cassette(cassette_path, faults=[agenttape.fault("refused", index=1)]):
        assert httpx.get(server.url + "/a").status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/b")


def test_recording_a_fault_answers_instead_of_the_network_and_is_stored_injected(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    server, seen = api
    item = agenttape.fault("rate_limit", on="GET /a", nth=1, retry_after=2)
    with agenttape.use_cassette(cassette_path, mode="once", faults=[item]):
        limited = httpx.get(server.url + "/a")
        answered = httpx.get(server.url + "/a")
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert answered.status_code == 200
    assert seen == ["/a"]  # the injected one never reached the server
    stored = agenttape.load(cassette_path).interactions
    assert [i.injected for i in stored] == [item.describe(), None]
    assert stored[0].response is not None and stored[0].response.status == 429
    server.stop()
    # Replayed without the fault, the cassette holds what happened: the 429, then the answer.
    with agenttape.use_cassette(cassette_path):
        assert httpx.get(server.url + "/a").status_code == 429
        assert httpx.get(server.url + "/a").status_code == 200
    # Given the fault again, the fault makes its answer again: the agent does not meet it twice.
    with agenttape.use_cassette(cassette_path, faults=[item]) as tape:
        assert httpx.get(server.url + "/a").status_code == 429
        assert httpx.get(server.url + "/a").status_code == 200
    assert tape.all_played and len(tape.faults_fired) == 1


def test_a_recorded_stream_is_not_cut_live(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    """Faults that change a recorded response have none to change while recording."""
    server, seen = api
    item = agenttape.fault("cut_stream")
    with (
        pytest.warns(agenttape.AgentTapeWarning, match="never fired"),
        agenttape.use_cassette(cassette_path, mode="once", faults=[item]) as tape,
    ):
        assert httpx.get(server.url + "/a").status_code == 200
    assert seen == ["/a"] and tape.faults_fired == []


def test_a_fault_that_never_fired_warns_or_with_strict_faults_fails(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    server, _seen = api
    record(cassette_path, server.url, "/a")
    server.stop()
    never = agenttape.fault("timeout", on="POST /never")
    with (
        pytest.warns(agenttape.AgentTapeWarning, match=r"1 fault .* never fired"),
        agenttape.use_cassette(cassette_path, faults=[never]),
    ):
        httpx.get(server.url + "/a")
    strict = agenttape.use_cassette(cassette_path, faults=[never], strict_faults=True)
    with (
        pytest.raises(agenttape.FaultNotFiredError, match="timeout on POST /never") as caught,
        strict,
    ):
        httpx.get(server.url + "/a")
    assert caught.value.faults == [never]


def test_an_escaping_exception_is_noted_with_the_faults_that_fired(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    server, _seen = api
    record(cassette_path, server.url, "/a")
    server.stop()
    item = agenttape.fault("rate_limit", on="GET /a")
    with (
        pytest.raises(KeyError) as caught,
        agenttape.use_cassette(cassette_path, faults=[item]),
    ):
        httpx.get(server.url + "/a").json()["items"]  # the error body has none
    (note,) = caught.value.__notes__
    assert note.startswith("agenttape: injected fault")
    assert f"rate_limit on GET /a, fired on GET {server.url}/a (interaction 0)" in note


def test_faults_from_the_environment(
    cassette_path: Path, api: tuple[Server, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _seen = api
    record(cassette_path, server.url, "/a")
    server.stop()
    faults = [{"kind": "status", "on": "GET /a", "status": 418}]
    monkeypatch.setenv("AGENTTAPE_FAULTS", json.dumps(faults))
    with agenttape.use_cassette(cassette_path) as tape:
        assert httpx.get(server.url + "/a").status_code == 418
    assert [f.fault for f in tape.faults_fired] == [fault_from_json(faults[0])]
    monkeypatch.setenv("AGENTTAPE_FAULTS", '[{"kind": "nope"}]')
    with pytest.raises(ValueError, match="AGENTTAPE_FAULTS: 'nope' is not a fault kind"):
        agenttape.use_cassette(cassette_path).start()


def test_slow_delays_until_the_clients_own_read_timeout(
    cassette_path: Path, api: tuple[Server, list[str]]
) -> None:
    server, _seen = api
    live = record(cassette_path, server.url, "/a")
    server.stop()
    slowest = agenttape.fault("slow", first_byte=5)
    with agenttape.use_cassette(cassette_path, faults=[slowest]), pytest.raises(httpx.ReadTimeout):
        httpx.get(server.url + "/a", timeout=httpx.Timeout(5, read=0.2))
    slow = agenttape.fault("slow", first_byte=0.1, between_chunks=0.05)
    with agenttape.use_cassette(cassette_path, faults=[slow]):
        assert httpx.get(server.url + "/a", timeout=5).json() == live[0]


def test_the_marker_takes_faults(pytester: pytest.Pytester, serve: Callable[..., Server]) -> None:
    server = serve(json_app)
    pytester.makepyfile(
        test_agent=f"""
        import httpx, pytest, agenttape

        @pytest.mark.agenttape(faults=[agenttape.fault("overloaded", nth=1)])
        def test_retry():
            first = httpx.get("{server.url}/a")
            assert first.status_code == 503
            assert httpx.get("{server.url}/a").json() == {{"ok": True}}

        @pytest.mark.agenttape(faults=[agenttape.fault("reset", on="GET /b")], strict_faults=True)
        def test_strict():
            httpx.get("{server.url}/a")

        @pytest.mark.agenttape(faults=[agenttape.fault("server_error")])
        def test_fails():
            httpx.get("{server.url}/a").raise_for_status()
        """
    )
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        patch.delenv("AGENTTAPE_MODE", raising=False)
        pytester.runpytest_subprocess("-p", "agenttape", "--agenttape-mode=once")
        server.stop()
        result = pytester.runpytest_subprocess("-p", "agenttape")
    result.assert_outcomes(passed=2, errors=1, failed=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_strict*", "  reset on GET /b"])
    result.stdout.fnmatch_lines(["*agenttape: injected fault: server_error, fired on GET*"])


def json_app(seen: Seen) -> Any:
    return json_reply({"ok": True})
