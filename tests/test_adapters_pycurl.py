"""pycurl through its adapter (its sockets live in libcurl): ``Curl.perform`` with the options
people set, recorded from real servers on 127.0.0.1 and replayed with the servers stopped;
the callbacks get the same bytes and ``getinfo`` the same answers.

In this test session ``sys.modules["pycurl"]`` is pytest-recording's stand-in (it puts one
there for the whole session): the adapter works through it, as a user's suite would."""

from __future__ import annotations

import gzip
import io
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
    late_reply,
    record_then_replay,
    refused_port,
)

pycurl = pytest.importorskip("pycurl")


def _app(seen: Seen) -> Reply:
    if seen.path == "/slow":
        return late_reply(2.0)
    return echo_text(seen, status=404 if seen.path == "/missing" else 200)


def _perform(curl: Any, url: str, **options: Any) -> tuple[Any, ...]:
    body, lines = io.BytesIO(), []
    curl.setopt(pycurl.URL, url)
    curl.setopt(pycurl.WRITEDATA, body)
    curl.setopt(pycurl.HEADERFUNCTION, lines.append)
    for name, value in options.items():
        curl.setopt(getattr(pycurl, name), value)
    curl.perform()
    return (
        curl.getinfo(pycurl.RESPONSE_CODE),
        curl.getinfo(pycurl.CONTENT_TYPE),
        curl.getinfo(pycurl.EFFECTIVE_URL),
        body.getvalue(),
        [line for line in lines if not line.lower().startswith((b"date:", b"server:"))],
    )


def test_performs_with_the_options_people_set(serve: Serve, cassette_path: Path) -> None:
    server = serve(_app)

    def run() -> list[Any]:
        curl = pycurl.Curl()
        seen = [_perform(curl, f"{server.url}/get?q=1", HTTPHEADER=["X-Token: t", "Accept: */*"])]
        seen.append(_perform(curl, f"{server.url}/post", POSTFIELDS="name=lamp"))
        seen.append(_perform(curl, f"{server.url}/again", HTTPGET=1))  # a GET again
        curl.reset()
        pieces: list[bytes] = []
        curl.setopt(pycurl.WRITEFUNCTION, pieces.append)
        curl.setopt(pycurl.URL, f"{server.url}/put")
        curl.setopt(pycurl.UPLOAD, 1)
        curl.setopt(pycurl.READFUNCTION, io.BytesIO(b"uploaded bytes").read)
        curl.setopt(pycurl.INFILESIZE, 14)
        curl.perform()
        seen.append((curl.getinfo(pycurl.RESPONSE_CODE), b"".join(pieces)))
        curl.reset()
        seen.append(_perform(curl, f"{server.url}/missing", CUSTOMREQUEST="DELETE"))
        curl.close()
        return seen

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0][:4] == (200, "text/plain", f"{server.url}/get?q=1", b"GET /get ")
    assert live[0][4][0].startswith(b"HTTP/1.1 200")
    assert live[1][3] == b"POST /post name=lamp"
    assert live[2][3] == b"GET /again "
    assert live[3] == (200, b"PUT /put uploaded bytes")
    assert live[4][0] == 404 and live[4][3].startswith(b"DELETE /missing")
    requests = [i.request for i in agenttape.load(cassette_path).interactions]
    assert [(r.method, r.body) for r in requests] == [
        ("GET", b""),
        ("POST", b"name=lamp"),
        ("GET", b""),
        ("PUT", b"uploaded bytes"),
        ("DELETE", b""),
    ]
    assert requests[0].headers == [("X-Token", "t"), ("Accept", "*/*")]


@pytest.mark.parametrize(
    ("path", "errno"), [("refused", 7), ("/slow", 28)], ids=["couldnt-connect", "timeout"]
)
def test_a_replayed_failure_is_pycurl_error_with_libcurls_errno(
    serve: Serve, cassette_path: Path, path: str, errno: int
) -> None:
    server = serve(_app)
    url = f"http://127.0.0.1:{refused_port()}/" if path == "refused" else server.url + path
    caught = []
    for mode in ("once", "none"):
        with agenttape.use_cassette(cassette_path, mode=mode):
            curl = pycurl.Curl()
            curl.setopt(pycurl.URL, url)
            curl.setopt(pycurl.TIMEOUT_MS, 300)
            curl.setopt(pycurl.WRITEDATA, io.BytesIO())
            with pytest.raises(pycurl.error) as raised:
                curl.perform()
        caught.append(raised.value)
    live, replayed = caught
    assert type(replayed) is type(live)
    assert replayed.args == live.args and live.args[0] == errno
    assert any("replayed from" in note for note in getattr(replayed, "__notes__", []))


def test_a_miss_is_unmatched_and_mode_none_never_reaches_the_server(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(_app)
    assert_a_miss_stays_off_the_network(
        cassette_path, server, lambda url: _perform(pycurl.Curl(), url)
    )


def test_a_curl_multi_is_blocked_while_the_network_is(serve: Serve, cassette_path: Path) -> None:
    """A CurlMulti drives transfers in libcurl, outside ``perform``: not recorded, and never
    let through to the network unseen."""
    server = serve(_app)
    with agenttape.use_cassette(cassette_path, mode="once"):
        _perform(pycurl.Curl(), f"{server.url}/known")
    asked = len(server.seen)
    curl = pycurl.Curl()
    curl.setopt(pycurl.URL, f"{server.url}/multi")
    with (
        agenttape.use_cassette(cassette_path, mode="none"),
        pytest.raises(agenttape.NetworkBlockedError, match="CurlMulti"),
    ):
        pycurl.CurlMulti().add_handle(curl)
    assert len(server.seen) == asked


def test_a_compressed_body_is_stored_as_sent_and_handed_over_decoded(
    serve: Serve, cassette_path: Path
) -> None:
    document = b"ticker,close\nACME,101.25\n" * 40
    server = serve(lambda seen: gzip_reply(document, "text/csv"))

    def run() -> tuple[Any, ...]:
        return _perform(pycurl.Curl(), f"{server.url}/gz", ENCODING="gzip")

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[3] == document
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None and stored.body == gzip.compress(document, mtime=0)
