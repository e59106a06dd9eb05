"""niquests, and requests on urllib3-future: niquests installs urllib3-future, which takes the
name ``urllib3``. Both are recorded where a request enters urllib3-future's connection pool and
replayed with the server stopped: status, headers in order, the body as the client gives it
(the cassette keeps the gzip bytes sent), streamed pieces as they came, and each client's own
exceptions for replayed failures.

These run only where niquests is installed: in the version matrix's niquests cells
(.ci/matrix.py), each an environment of its own, never beside the real urllib3."""

from __future__ import annotations

import gzip
import types
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import (
    Serve,
    assert_a_miss_stays_off_the_network,
    client_app,
    failing_urls,
    loaded,
    record_then_replay,
    record_then_replay_async,
)

niquests = pytest.importorskip("niquests")

PAYLOAD = b'{"results": [{"title": "agenttape", "href": "https://example.test/"}]}'


app = client_app(PAYLOAD)


def session_run(module: Any, url: str) -> list[Any]:
    """What a tool built on ``module`` (niquests or requests) gets from four requests."""
    got: list[Any] = []
    with module.Session() as session:
        zipped = session.get(url + "/gzip", timeout=5)
        got.append((zipped.status_code, list(zipped.headers.items()), zipped.content))
        posted = session.post(url + "/echo", data=b"q=1", timeout=5)
        got.append((posted.status_code, posted.json()))
        streamed = session.get(url + "/pieces", stream=True, timeout=5)
        got.append((list(streamed.headers.items()), list(streamed.iter_content(None))))
        streamed.close()
        missing = session.get(url + "/missing", timeout=5)
        got.append((missing.status_code, missing.reason, missing.content))
    return got


def assert_recorded(cassette: Path, url: str) -> None:
    interactions = agenttape.load(cassette).interactions
    assert [i.request.url for i in interactions] == [
        f"{url}/gzip",
        f"{url}/echo",
        f"{url}/pieces",
        f"{url}/missing",
    ]
    zipped, posted, pieces = (i.response for i in interactions[:3])
    assert zipped is not None and posted is not None and pieces is not None
    assert gzip.decompress(zipped.body) == PAYLOAD  # the wire bytes, still gzip
    # (the names as urllib3-future reports them: lowercased before 2.1)
    assert ("content-encoding", "gzip") in [(name.lower(), value) for name, value in zipped.headers]
    assert interactions[1].request.body == b"q=1"
    assert sum(size for size, _offset in pieces.chunks) == 30


@pytest.mark.parametrize("client", ["niquests", "requests"])
def test_a_session_records_and_replays_byte_exact(
    client: str, serve: Serve, cassette_path: Path
) -> None:
    """niquests itself, and plain requests once urllib3-future has taken the name urllib3."""
    module = pytest.importorskip(client)
    server = serve(app)
    unrecorded = session_run(module, server.url)
    live, replayed = record_then_replay(
        cassette_path, server, lambda: session_run(module, server.url)
    )
    assert replayed == live == unrecorded
    assert live[0][2] == PAYLOAD
    # each piece as the client reads it live (niquests 3.21 hands on each read: three)
    assert b"".join(live[2][1]) == b"a" * 10 + b"b" * 10 + b"c" * 10
    assert live[3][:2] == (404, "Not Found")
    assert_recorded(cassette_path, server.url)


def failures(module: Any, url: str) -> list[tuple[type[BaseException], type[Any]]]:
    got = []
    for target, timeout in failing_urls(url):
        with pytest.raises(Exception) as caught:
            module.get(target, timeout=timeout)
        inner = caught.value.args[0] if caught.value.args else None
        got.append((type(caught.value), type(getattr(inner, "reason", inner))))
    return got


@pytest.mark.parametrize("client", ["niquests", "requests"])
def test_failures_replay_as_each_client_raises_them(
    client: str, serve: Serve, cassette_path: Path
) -> None:
    module = pytest.importorskip(client)
    server = serve(app)
    unrecorded = failures(module, server.url)
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = failures(module, server.url)
    server.stop()
    with agenttape.use_cassette(cassette_path, match_on=("method", "path")) as tape:
        replayed = failures(module, server.url)
        assert tape.all_played
    assert replayed == live == unrecorded
    assert [kind.__name__ for kind, _ in live] == [
        "ReadTimeout",
        "ConnectionError",
        "ConnectionError",
    ]
    assert [reason.__name__ for _, reason in live[1:]] == [
        "NewConnectionError",
        "NameResolutionError",
    ]


async def test_an_async_session_records_and_replays(serve: Serve, cassette_path: Path) -> None:
    if not hasattr(niquests, "AsyncSession"):
        pytest.skip(f"niquests {niquests.__version__} has no AsyncSession (it came in 3.1)")
    server = serve(app)

    async def run() -> list[Any]:
        got: list[Any] = []
        async with niquests.AsyncSession() as session:
            zipped = await session.get(server.url + "/gzip", timeout=5)
            got.append((zipped.status_code, list(zipped.headers.items()), zipped.content))
            posted = await session.post(server.url + "/echo", data=b"q=1", timeout=5)
            got.append((posted.status_code, posted.json()))
            streamed = await session.get(server.url + "/pieces", stream=True, timeout=5)
            got.append(b"".join([piece async for piece in await streamed.iter_content(None)]))
            missing = await session.get(server.url + "/missing", timeout=5)
            got.append((missing.status_code, missing.content))
        return got

    unrecorded = await run()
    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live == unrecorded
    assert live[0][2] == PAYLOAD
    interactions = (await loaded(cassette_path)).interactions
    zipped = interactions[0].response
    assert zipped is not None and gzip.decompress(zipped.body) == PAYLOAD


def test_a_miss_is_unmatched_and_mode_none_stays_off_the_network(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(app)
    assert_a_miss_stays_off_the_network(
        cassette_path, server, lambda url: niquests.get(url, timeout=5)
    )


def test_an_urllib3_future_it_does_not_know_keeps_the_adapter_off_and_names_it() -> None:
    """The whole urllib3 adapter stays off (the generic warning says so once, with this
    reason) rather than patch internals it does not know."""
    from agenttape._adapters import ledger
    from agenttape._adapters.urllib3 import future

    unknown = types.ModuleType("urllib3")
    unknown.backend = types.ModuleType("urllib3.backend")  # type: ignore[attr-defined]
    unknown.__version__ = "2.99.0"  # type: ignore[attr-defined]
    assert future.is_future(unknown)
    with pytest.raises(ledger.PatchError, match=r"urllib3-future 2\.99\.0 has taken the name"):
        future.install(unknown)
