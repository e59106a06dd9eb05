"""curl_cffi through its adapter (its sockets live in libcurl): recorded from real servers on
127.0.0.1, replayed with the servers stopped, and compared as the user's code sees the
response: a real ``curl_cffi.requests.Response``, byte for byte, piece for piece."""

from __future__ import annotations

import gzip
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import (
    Reply,
    Seen,
    Serve,
    assert_a_miss_stays_off_the_network,
    echo_text,
    gzip_reply,
    loaded,
    record_then_replay,
    record_then_replay_async,
    refused_port,
)

curl_requests = pytest.importorskip("curl_cffi.requests")

PIECES = [b"first piece;", b"second piece;", b"last"]


def _app(seen: Seen) -> Reply:
    if seen.path.startswith("/stream"):
        return Reply(headers=[("Content-Type", "text/plain")], chunks=PIECES, chunked=True)
    posted = seen.method == "POST"
    return echo_text(
        seen, status=201 if posted else 200, reason="Made" if posted else None, chunked=False
    )


def _seen(response: Any) -> tuple[Any, ...]:
    return (
        type(response),
        response.status_code,
        response.reason,
        response.url,
        list(response.headers.multi_items()),
        response.content,
        response.http_version,
    )


def test_session_requests_replay_as_real_responses(serve: Serve, cassette_path: Path) -> None:
    server = serve(_app)

    def run() -> list[Any]:
        with curl_requests.Session(impersonate="chrome") as session:
            got = session.get(f"{server.url}/items?page=2", headers={"X-Token": "t"})
            posted = session.post(f"{server.url}/items", data=b'{"name": "lamp"}')
        plain = curl_requests.get(f"{server.url}/plain")
        return [_seen(got), _seen(posted), _seen(plain)]

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0][0] is curl_requests.Response
    assert live[1][1:3] == (201, "Made")
    assert live[1][5] == b'POST /items {"name": "lamp"}'
    assert [name for name, _value in live[0][4]][1:3] == ["X-Zeta", "x-alpha"]
    interactions = agenttape.load(cassette_path).interactions
    got, posted = interactions[0].request, interactions[1].request
    assert got.url == f"{server.url}/items?page=2"
    assert ("X-Token", "t") in got.headers
    assert got.header("curl_cffi-impersonate") is not None
    assert (posted.method, posted.body) == ("POST", b'{"name": "lamp"}')


def test_a_streamed_body_is_recorded_and_replayed_piece_by_piece(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(_app)

    def run() -> list[bytes]:
        with curl_requests.Session() as session:
            response = session.get(f"{server.url}/stream", stream=True)
            pieces = list(response.iter_content())
            response.close()
        return pieces

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert b"".join(live) == b"".join(PIECES)
    response = agenttape.load(cassette_path).interactions[0].response
    assert response is not None and list(response.iter_chunks()) == PIECES


class _CallerLateToHook(ThreadPoolExecutor):
    """Hands a task back only once it has ended (or half a second has passed): the caller
    descheduled right after starting a streamed perform, as on a loaded machine."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        wait([future], timeout=0.5)
        return future


def test_a_streamed_perform_that_ends_at_once_does_not_deadlock_the_caller(
    serve: Serve, cassette_path: Path
) -> None:
    """curl_cffi hooks the stream's cleanup after the perform starts, and up to 0.14 that
    cleanup waits for the caller to parse the head: an answer that ended first would hold the
    caller for ever, recording or replaying."""
    server = serve(_app)

    def run() -> list[bytes]:
        pieces: list[bytes] = []

        def stream() -> None:
            with curl_requests.Session() as session:
                session._executor = _CallerLateToHook()
                response = session.get(f"{server.url}/stream", stream=True)
                pieces.extend(response.iter_content())

        caller = threading.Thread(target=stream, daemon=True)
        caller.start()
        caller.join(timeout=20)
        assert not caller.is_alive(), "the streamed request never returned"
        return pieces

    live, replayed = record_then_replay(cassette_path, server, run)
    assert b"".join(live) == b"".join(replayed) == b"".join(PIECES)


async def test_async_session_plain_and_streamed(serve: Serve, cassette_path: Path) -> None:
    server = serve(_app)

    async def run() -> list[Any]:
        async with curl_requests.AsyncSession() as session:
            got = await session.get(f"{server.url}/async")
            streamed = await session.get(f"{server.url}/stream", stream=True)
            pieces = [piece async for piece in streamed.aiter_content()]
            await streamed.aclose()
        return [_seen(got), pieces]

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[0][5] == b"GET /async "
    assert b"".join(live[1]) == b"".join(PIECES)
    assert len((await loaded(cassette_path)).interactions) == 2


def test_a_replayed_failure_is_curl_cffis_own_error_with_libcurls_code(
    cassette_path: Path,
) -> None:
    url = f"http://127.0.0.1:{refused_port()}/down"
    caught = []
    for mode in ("once", "none"):
        with (
            agenttape.use_cassette(cassette_path, mode=mode),
            pytest.raises(curl_requests.exceptions.ConnectionError) as raised,
        ):
            curl_requests.get(url)
        caught.append(raised.value)
    live, replayed = caught
    assert type(replayed) is type(live)
    assert replayed.code == live.code == 7
    assert str(replayed) == str(live)
    # curl_cffi raises its own error from libcurl's, the one replayed: the note is on the
    # one the caller catches, once.
    notes = [note for note in getattr(replayed, "__notes__", []) if "replayed from" in note]
    assert len(notes) == 1
    assert not getattr(live, "__notes__", [])


def test_a_miss_is_unmatched_and_mode_none_never_reaches_the_server(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(_app)
    assert_a_miss_stays_off_the_network(cassette_path, server, curl_requests.get)


def test_a_curl_handle_used_directly_answers_getinfo_from_the_recording(
    serve: Serve, cassette_path: Path
) -> None:
    from io import BytesIO

    from curl_cffi import Curl, CurlInfo, CurlOpt

    server = serve(_app)

    def run() -> tuple[Any, ...]:
        curl = Curl()
        body, head = BytesIO(), BytesIO()
        curl.setopt(CurlOpt.URL, f"{server.url}/direct".encode())
        curl.setopt(CurlOpt.WRITEDATA, body)
        curl.setopt(CurlOpt.HEADERDATA, head)
        curl.perform()
        seen = (
            curl.getinfo(CurlInfo.RESPONSE_CODE),
            curl.getinfo(CurlInfo.EFFECTIVE_URL),
            body.getvalue(),
            head.getvalue().split(b"\r\n")[1:],
        )
        curl.close()
        return seen

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0] == 200 and live[2] == b"GET /direct "


def test_a_compressed_body_is_stored_as_sent_and_handed_over_decoded(
    serve: Serve, cassette_path: Path
) -> None:
    """libcurl decompresses for the callback; the cassette keeps the bytes the server sent."""
    document = b'{"quote": 101.25}' * 30
    server = serve(lambda seen: gzip_reply(document))

    def run() -> list[Any]:
        with curl_requests.Session() as session:
            got = session.get(f"{server.url}/gz", accept_encoding="gzip, deflate")
            streamed = session.get(f"{server.url}/gz", accept_encoding="gzip", stream=True)
            pieces = b"".join(streamed.iter_content())
        return [got.content, got.headers.get("content-encoding"), pieces]

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == [document, "gzip", document]
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None and stored.body == gzip.compress(document, mtime=0)
