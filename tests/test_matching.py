"""The matcher: what makes two requests the same, and what a miss tells the user."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import agenttape
from agenttape._core.matching.matcher import Matcher
from agenttape._core.urls import _parse_general, _parse_simple
from tests.servers import Server, json_reply


def echo(request: httpx.Request) -> httpx.Response:
    """A transport answering with a serial number, so each recorded response is distinct."""
    echo.calls += 1  # type: ignore[attr-defined]
    return httpx.Response(200, json={"serial": echo.calls, "url": str(request.url)})  # type: ignore[attr-defined]


echo.calls = 0  # type: ignore[attr-defined]


def client() -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(echo), base_url="https://api.test")


def record(path: Path, *requests: tuple[str, str, Any], **options: Any) -> list[Any]:
    with agenttape.use_cassette(path, mode="once", **options), client() as c:
        return [
            c.request(method, url, json=body).json()["serial"] for method, url, body in requests
        ]


def replay(path: Path, method: str, url: str, body: Any = None, **options: Any) -> int:
    with agenttape.use_cassette(path, **options), client() as c:
        serial: int = c.request(method, url, json=body).json()["serial"]
        return serial


def test_query_order_does_not_matter(cassette_path: Path) -> None:
    [serial] = record(cassette_path, ("GET", "/items?a=1&b=2&b=3", None))
    assert replay(cassette_path, "GET", "/items?b=2&a=1&b=3") == serial
    with pytest.raises(agenttape.UnmatchedInteractionError):
        replay(cassette_path, "GET", "/items?a=1&b=2")


def test_json_bodies_compare_canonically(cassette_path: Path) -> None:
    [serial] = record(
        cassette_path, ("POST", "/chat", {"model": "m", "messages": [{"a": 1, "b": 2}]})
    )
    with agenttape.use_cassette(cassette_path), client() as c:
        reordered = b'{ "messages": [ {"b": 2, "a": 1} ], "model": "m" }'
        assert c.post("/chat", content=reordered).json()["serial"] == serial
    with pytest.raises(
        agenttape.UnmatchedInteractionError, match=r"body.messages\[0\].b: expected 2, got 3"
    ):
        replay(cassette_path, "POST", "/chat", {"model": "m", "messages": [{"a": 1, "b": 3}]})


def test_non_json_bodies_compare_as_bytes(cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"), client() as c:
        c.post("/upload", content=b"\x00\x01binary")
    with agenttape.use_cassette(cassette_path), client() as c:
        c.post("/upload", content=b"\x00\x01binary")
        with pytest.raises(agenttape.UnmatchedInteractionError, match="body: expected 8 bytes"):
            c.post("/upload", content=b"\x00\x02binary")


def test_headers_ignored_by_default_and_matched_on_request(cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"), client() as c:
        c.get("/h", headers={"X-Tenant": "a", "User-Agent": "one"})
    with agenttape.use_cassette(cassette_path), client() as c:
        c.get("/h", headers={"X-Tenant": "b", "User-Agent": "two"})
    with (
        agenttape.use_cassette(
            cassette_path, match_on=("method", "url", "body", "headers:x-tenant")
        ),
        client() as c,
        pytest.raises(
            agenttape.UnmatchedInteractionError,
            match=re.escape("headers.x-tenant: expected 'a', got 'b'"),
        ),
    ):
        c.get("/h", headers={"X-Tenant": "b"})


def test_match_on_can_narrow(cassette_path: Path) -> None:
    [serial] = record(cassette_path, ("GET", "/search?page=1", None))
    assert replay(cassette_path, "GET", "/search?page=9", match_on=("method", "path")) == serial


def test_ignore_json_fields(cassette_path: Path) -> None:
    body = {
        "metadata": {"request_id": "r1", "user": "u"},
        "messages": [{"id": "m1", "content": "hi"}],
    }
    [serial] = record(cassette_path, ("POST", "/chat", body))
    changed = {
        "metadata": {"request_id": "r2", "user": "u"},
        "messages": [{"id": "m9", "content": "hi"}],
    }
    ignore = ("metadata.request_id", "messages[*].id")
    assert replay(cassette_path, "POST", "/chat", changed, ignore_json_fields=ignore) == serial
    with pytest.raises(
        agenttape.UnmatchedInteractionError, match=re.escape("body.metadata.request_id")
    ):
        replay(cassette_path, "POST", "/chat", changed)
    # What still differs is named from the body's root, the ignored paths left out.
    changed["metadata"]["user"] = "v"  # type: ignore[index]
    with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
        replay(cassette_path, "POST", "/chat", changed, ignore_json_fields=ignore)
    assert "body.metadata.user: expected 'u', got 'v'" in str(miss.value)
    assert "request_id" not in str(miss.value) and "messages" not in str(miss.value)


def test_identical_requests_are_served_in_order_each_once(cassette_path: Path) -> None:
    serials = record(cassette_path, *[("POST", "/chat", {"q": "same"})] * 3)
    with agenttape.use_cassette(cassette_path), client() as c:
        served = [c.post("/chat", json={"q": "same"}).json()["serial"] for _ in range(3)]
        assert served == serials
        with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
            c.post("/chat", json={"q": "same"})
    message = str(miss.value)
    assert "already played (3)" in message
    assert "allow_repeats=True" in message


def test_allow_repeats_serves_the_last_again(cassette_path: Path) -> None:
    serials = record(cassette_path, ("GET", "/r", None), ("GET", "/r", None))
    with agenttape.use_cassette(cassette_path, allow_repeats=True), client() as c:
        served = [c.get("/r").json()["serial"] for _ in range(4)]
    assert served == [serials[0], serials[1], serials[1], serials[1]]


def test_miss_error_names_differences_path_mode_and_rerecord(cassette_path: Path) -> None:
    record(
        cassette_path,
        ("GET", "/orders?page=2&sort=asc", None),
        (
            "POST",
            "/chat",
            {
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hello"},
                ]
            },
        ),
    )
    with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
        replay(cassette_path, "GET", "/orders?page=3&sort=asc")
    error = miss.value
    assert isinstance(error, AssertionError)
    assert error.cassette_path == str(cassette_path)
    assert error.mode == "none"
    assert error.request.url == "https://api.test/orders?page=3&sort=asc"
    assert error.candidates[0].differences == ["url.query.page: expected '2', got '3'"]
    message = str(error)
    assert str(cassette_path) in message and "mode 'none'" in message
    assert "AGENTTAPE_MODE=all" in message

    with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
        replay(
            cassette_path,
            "POST",
            "/chat",
            {
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "bye"},
                ]
            },
        )
    assert miss.value.candidates[0].differences == [
        "body.messages[1].content: expected 'hello', got 'bye'"
    ]


def test_an_identical_played_request_is_not_shown_as_closest_without_saying_so(
    cassette_path: Path,
) -> None:
    record(cassette_path, ("GET", "/once", None))
    with agenttape.use_cassette(cassette_path), client() as c:
        c.get("/once")
        with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
            c.get("/once")
    [candidate] = miss.value.candidates
    assert candidate.played and candidate.differences == []
    assert "(already played)" in str(miss.value)


def test_hits_are_found_through_the_index_without_comparing_candidates(
    cassette_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(cassette_path, *[("GET", f"/item/{n}", None) for n in range(500)])

    def no_scan(*args: object) -> list[str]:
        raise AssertionError("a hit must not compare candidates one by one")

    monkeypatch.setattr(Matcher, "differences", no_scan)
    with agenttape.use_cassette(cassette_path), client() as c:
        assert [c.get(f"/item/{n}").json()["url"][-4:] for n in (499, 0, 250)] == [
            "/499",
            "em/0",
            "/250",
        ]


def test_matcher_keys() -> None:
    matcher = Matcher()
    a = agenttape.Request("GET", "HTTPS://API.test:443/p?x=1&y=2")
    b = agenttape.Request("get", "https://api.test/p?y=2&x=1")
    assert matcher.key(a) == matcher.key(b)
    body = json.dumps({"b": 1, "a": [1.5, None]}).encode()
    same = b'{"a":[1.5,null],"b":1}'
    assert matcher.body_key(body) == matcher.body_key(same)
    assert matcher.body_key(b"not json {") == b"not json {"


URL_PIECES = ["a", "Z", "0", "9", ".", "-", "_", "~", "/", "?", "&", "=", "%", "%41", "+", ";"]
URL_PIECES += ["#", "@", ":", "[", "]", " ", "\t", "\n", "é", "!", "'", "(", "*", ",", "$"]


@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "Https", "ftp", "ws", ""]),
    host=st.sampled_from(["api.test", "127.0.0.1", "API.test", "a-b.c", "", "[::1]", "u@h"]),
    port=st.one_of(st.none(), st.integers(0, 99999).map(str), st.sampled_from(["", "x", "0080"])),
    path=st.lists(st.sampled_from(URL_PIECES), max_size=12).map("".join),
    query=st.one_of(st.none(), st.lists(st.sampled_from(URL_PIECES), max_size=12).map("".join)),
)
def test_fast_url_parsing_agrees_with_urlsplit(
    scheme: str, host: str, port: str | None, path: str, query: str | None
) -> None:
    """The fast path declines or gives exactly what urlsplit and parse_qsl give."""
    url = f"{scheme}://{host}" + (f":{port}" if port is not None else "") + path
    url += f"?{query}" if query is not None else ""
    fast = _parse_simple(url)
    assert fast is None or fast == _parse_general(url), url


def test_fast_url_parsing_takes_ordinary_urls_and_declines_escapes() -> None:
    for url in (
        "https://api.openai.com/v1/chat/completions",
        "http://127.0.0.1:8080/items/7?page=2&sort=name&flag",
        "https://h.test/?a=1&&b=&a=0",
    ):
        assert _parse_simple(url) == _parse_general(url) is not None
    for url in (
        "https://h.test/?q=a%20b",
        "https://h.test/?q=a+b",
        "HTTPS://h.test/",
        "https://H.test/",
        "https://h.test:99999/",
        "https://u:p@h.test/",
        "https://h.test/#frag",
    ):
        assert _parse_simple(url) is None


def test_keys_with_one_url_part_or_none() -> None:
    request = agenttape.Request("GET", "https://api.test/a?x=1")
    assert Matcher(["path"]).key(request) == ("/a",)
    assert Matcher(["method", "query"]).key(request) == ("GET", (("x", "1"),))
    assert Matcher(["method"]).key(request) == ("GET",)


def test_multipart_bodies_compare_by_parts_not_by_their_random_boundary(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    import requests

    server = serve(lambda seen: json_reply({"size": len(seen.body)}))
    path = tmp_path / "upload.msgpack"
    form = {"purpose": "assistants"}

    def upload(content: bytes, via: str = "httpx") -> Any:
        files = {"file": ("notes.txt", content, "text/plain")}
        if via == "requests":
            return requests.post(f"{server.url}/files", files=files, data=form, timeout=5).json()
        return httpx.post(f"{server.url}/files", files=files, data=form).json()

    with agenttape.use_cassette(path, mode="once"):
        recorded = [upload(b"hello"), upload(b"hello", via="requests")]
    (first, second) = agenttape.load(path).interactions
    assert first.request.body != second.request.body  # each drew its own boundary
    with agenttape.use_cassette(path):
        assert [upload(b"hello"), upload(b"hello", via="requests")] == recorded
    with agenttape.use_cassette(path), pytest.raises(agenttape.UnmatchedInteractionError) as miss:
        upload(b"bye")
    assert "body.part[1](file): expected 5 bytes b'hello', got 3 bytes b'bye'" in str(miss.value)
    assert len(server.seen) == 2


@pytest.mark.parametrize(
    ("recorded", "sent", "named"),
    [
        (
            b'{"temperature": 0.0}',
            b'{"temperature": -0.0}',
            "body.temperature: expected 0.0, got -0.0",
        ),
        (b'"where is my order"', b'"where is my \\u006frder"', "body: expected"),
    ],
)
def test_a_miss_names_a_body_difference_that_json_equality_misses(
    cassette_path: Path, recorded: bytes, sent: bytes, named: str
) -> None:
    """Bodies the match tells apart (canonical JSON, or bytes for a body that is no JSON
    object or array) whose parsed values Python calls equal are still named as different."""
    with agenttape.use_cassette(cassette_path, mode="once"), client() as c:
        c.post("/chat", content=recorded)
    with (
        agenttape.use_cassette(cassette_path),
        client() as c,
        pytest.raises(agenttape.UnmatchedInteractionError) as miss,
    ):
        c.post("/chat", content=sent)
    [candidate] = miss.value.candidates
    assert not candidate.played
    assert candidate.differences and candidate.differences[0].startswith(named)
    assert "identical request" not in str(miss.value)
