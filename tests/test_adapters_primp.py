"""primp through its adapter (a Rust client): recorded from real servers on 127.0.0.1,
replayed with the servers stopped, read through the same attributes and methods; and a
client whose sockets live in native code that agenttape cannot intercept is named and
blocked, never bypassed in silence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import (
    Reply,
    Seen,
    Serve,
    assert_a_miss_stays_off_the_network,
    loaded,
    record_then_replay,
    record_then_replay_async,
    refused_port,
)

primp = pytest.importorskip("primp")

VERSION = metadata.version("primp")
# primp 1 added streamed responses (``stream=True``) and its own exception classes; before,
# a response streamed with ``stream()`` and a failure was a RuntimeError.
STREAMS = hasattr(primp, "StatusError")
CONNECT_ERROR = getattr(primp, "ConnectError", RuntimeError)
PIECES = [b'{"results": [', b'{"title": "one"},', b'{"title": "two"}]}']


def _app(seen: Seen) -> Reply:
    if seen.path == "/missing":
        return Reply(status=404, headers=[("Content-Type", "text/plain")], chunks=[b"nope"])
    return Reply(
        headers=[("Content-Type", "application/json"), ("X-Zeta", "z"), ("x-alpha", "a")],
        chunks=PIECES,
        chunked=True,
    )


def _seen(response: Any) -> tuple[Any, ...]:
    return (
        response.status_code,
        response.url,
        response.headers,
        response.content,
        response.text,
        response.json(),
        response.encoding,
    )


def test_client_requests_replay_with_the_same_reads(serve: Serve, cassette_path: Path) -> None:
    server = serve(_app)

    def run() -> list[Any]:
        client = primp.Client(
            impersonate="chrome" if STREAMS else "chrome_131", params={"region": "wt-wt"}
        )
        got = client.get(f"{server.url}/search", params={"q": "tape"}, headers={"X-Key": "k"})
        posted = client.post(f"{server.url}/search", json={"q": "tape", "page": 2})
        if STREAMS:
            pieces = list(client.get(f"{server.url}/stream", stream=True).iter_bytes())
            missing = client.get(f"{server.url}/missing")
            with pytest.raises(primp.StatusError) as raised:
                missing.raise_for_status()
            status = raised.value.args[0]
        else:
            pieces = list(client.get(f"{server.url}/stream").stream())
            status = client.get(f"{server.url}/missing").status_code
        plain = primp.get(f"{server.url}/plain")
        return [_seen(got), _seen(posted), pieces, status, plain.content]

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0][3] == b"".join(PIECES)
    assert list(live[0][2])[:3] == ["content-type", "x-zeta", "x-alpha"]
    assert live[2] == PIECES if STREAMS else b"".join(live[2]) == b"".join(PIECES)
    assert live[3] == 404
    requests = [i.request for i in agenttape.load(cassette_path).interactions]
    assert requests[0].url == f"{server.url}/search?q=tape"
    assert requests[1].url == f"{server.url}/search?region=wt-wt"
    assert requests[1].body == b'{"page":2,"q":"tape"}'
    assert requests[1].body == server.seen[1].body  # as primp sent it
    # The impersonated browser's headers, as the client holds them, are the request's.
    assert requests[0].header("user-agent") == server.seen[0].header("user-agent")
    assert requests[0].header("x-key") == "k"


async def test_async_client_plain_and_streamed(serve: Serve, cassette_path: Path) -> None:
    server = serve(_app)

    async def run() -> list[Any]:
        client = primp.AsyncClient()
        got = await client.get(f"{server.url}/async")
        if not STREAMS:
            return [_seen(got), list((await client.get(f"{server.url}/stream")).stream())]
        streamed = await client.get(f"{server.url}/stream", stream=True)
        pieces = [piece async for piece in streamed.aiter_bytes()]
        return [_seen(got), pieces]

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[1] == PIECES if STREAMS else b"".join(live[1]) == b"".join(PIECES)
    assert len((await loaded(cassette_path)).interactions) == 2


def test_a_replayed_failure_is_primps_own_exception(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/down"
    caught = []
    for mode in ("once", "none"):
        with (
            agenttape.use_cassette(cassette_path, mode=mode),
            pytest.raises(CONNECT_ERROR) as raised,
        ):
            primp.Client().get(url)
        caught.append(raised.value)
    live, replayed = caught
    assert type(replayed) is type(live) and str(replayed) == str(live)
    assert any("replayed from" in note for note in getattr(replayed, "__notes__", []))


def test_a_miss_is_unmatched_and_mode_none_never_reaches_the_server(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(_app)
    assert_a_miss_stays_off_the_network(cassette_path, server, lambda url: primp.Client().get(url))


NOT_INTERCEPTED = """
    import sys, warnings
    import agenttape
    import primp
    import rnet  # a native client agenttape has no adapter for (a stand-in here)

    del primp.AsyncClient  # a primp whose entry points the adapter does not know
    url = "http://127.0.0.1:" + sys.argv[2] + "/"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with agenttape.use_cassette(sys.argv[1], mode="all"):
            import urllib.request
            urllib.request.urlopen(url).read()
        for _ in range(2):
            with agenttape.use_cassette(sys.argv[1], mode="none"):
                for call in (lambda: primp.Client().get(url), lambda: rnet.Client().get(url)):
                    try:
                        call()
                        print("reached")
                    except agenttape.NetworkBlockedError:
                        print("blocked")
        with agenttape.use_cassette(sys.argv[1], mode="none"):
            import tls_client  # imported while a cassette is active

            try:
                tls_client.Session().get(url)
                print("reached")
            except agenttape.NetworkBlockedError:
                print("blocked")
    said = [str(w.message) for w in caught if issubclass(w.category, agenttape.AgentTapeWarning)]
    print(len(said))
    for message in said:
        print(message)
"""

FAKE_RNET = """
__version__ = "0.1"


class Client:
    def get(self, url):
        return "sent"
"""


def test_a_native_client_not_intercepted_is_named_once_and_blocked(
    tmp_path: Path, serve: Serve
) -> None:
    server = serve(_app)
    (tmp_path / "rnet.py").write_text(FAKE_RNET)
    (tmp_path / "tls_client.py").write_text(FAKE_RNET.replace("class Client", "class Session"))
    script = tmp_path / "native.py"
    script.write_text(textwrap.dedent(NOT_INTERCEPTED))
    result = subprocess.run(
        [sys.executable, script, tmp_path / "tape.msgpack", str(server.port)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{Path.cwd()}"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:5] == ["blocked"] * 5
    assert lines[5] == "3"
    named = "\n".join(lines[6:])
    assert f"primp {VERSION}" in named and "AsyncClient" in named
    assert "rnet (version unknown)" in named or "rnet 0.1" in named
    assert "tls-client" in named
    assert named.count("NetworkBlockedError") == 3
    assert server.seen and all(seen.path == "/" for seen in server.seen[:1])
    assert len(server.seen) == 1  # only the recording reached it
