"""The network guard: in replay, a connection no cassette serves fails loudly and names the
host; an allow-list lets chosen hosts through. Also: adapters stay out of the way of a
process that never imports their library."""

from __future__ import annotations

import asyncio
import http.client
import multiprocessing
import os
import shlex
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

import agenttape
from tests.servers import App, Server, json_reply

Serve = Callable[[App], Server]


@pytest.fixture
def empty_cassette(cassette_path: Path) -> Path:
    agenttape.Cassette(cassette_path, mode="all").save()
    return cassette_path


def connect(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=5):
        pass


def test_replay_blocks_a_raw_socket_and_names_the_host(serve: Serve, empty_cassette: Path) -> None:
    server = serve(lambda seen: json_reply({}))
    with (
        agenttape.use_cassette(empty_cassette),
        pytest.raises(agenttape.NetworkBlockedError) as caught,
    ):
        connect("localhost", server.port)
    assert caught.value.host == "localhost"
    assert caught.value.port == server.port
    assert "localhost" in str(caught.value) and "allowed_hosts" in str(caught.value)
    assert str(empty_cassette) in str(caught.value)
    assert not server.seen


def test_replay_blocks_a_library_without_an_adapter(serve: Serve, empty_cassette: Path) -> None:
    import smtplib

    server = serve(lambda seen: json_reply({}))
    with (
        agenttape.use_cassette(empty_cassette),
        pytest.raises(agenttape.NetworkBlockedError) as caught,
    ):
        smtplib.SMTP("127.0.0.1", server.port, timeout=5)
    assert caught.value.host == "127.0.0.1"
    assert not server.seen


def test_http_client_is_served_by_the_cassette_never_the_network(
    serve: Serve, empty_cassette: Path
) -> None:
    server = serve(lambda seen: json_reply({}))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    with (
        agenttape.use_cassette(empty_cassette),
        pytest.raises(agenttape.UnmatchedInteractionError),
    ):
        connection.request("GET", "/")
        connection.getresponse()
    assert not server.seen


def test_worker_threads_are_blocked_too(serve: Serve, empty_cassette: Path) -> None:
    server = serve(lambda seen: json_reply({}))
    with (
        agenttape.use_cassette(empty_cassette),
        ThreadPoolExecutor(1) as pool,
        pytest.raises(agenttape.NetworkBlockedError),
    ):
        pool.submit(connect, "127.0.0.1", server.port).result()


def test_allowed_hosts_let_loopback_through(serve: Serve, empty_cassette: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    with agenttape.use_cassette(empty_cassette, allowed_hosts=("127.0.0.1",)):
        connect("127.0.0.1", server.port)
    with agenttape.use_cassette(empty_cassette, allowed_hosts=["local*"]):
        connect("localhost", server.port)
    # A regular expression, matched from the start of the host (pytest-recording's reading).
    with agenttape.use_cassette(empty_cassette, allowed_hosts=[r"re:127\.0\.0\.\d+$"]):
        connect("127.0.0.1", server.port)
    refused = agenttape.use_cassette(empty_cassette, allowed_hosts=["re:0\\.0", "re:10\\."])
    with refused, pytest.raises(agenttape.NetworkBlockedError):
        connect("127.0.0.1", server.port)
    with agenttape.use_cassette(empty_cassette, block_network=False):
        connect("127.0.0.1", server.port)


def test_recording_does_not_block_by_default(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        connect("127.0.0.1", server.port)


def test_blocking_while_recording_still_lets_adapters_record(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    with agenttape.use_cassette(cassette_path, mode="all", block_network=True) as tape:
        assert requests.get(f"{server.url}/ok", timeout=5).json() == {"ok": True}
        with pytest.raises(agenttape.NetworkBlockedError):
            connect("127.0.0.1", server.port)
    assert len(tape.interactions) == 1


def test_outside_a_cassette_nothing_is_blocked(serve: Serve, empty_cassette: Path) -> None:
    server = serve(lambda seen: json_reply({}))
    with agenttape.use_cassette(empty_cassette):
        pass
    connect("127.0.0.1", server.port)


def test_a_guard_blockbuster_put_back_is_installed_again(
    serve: Serve, empty_cassette: Path
) -> None:
    """blockbuster, stopping, puts back the socket functions it found when it started: a
    guard first installed inside its test (on top of its wrappers) is gone after it. The
    next cassette installs it again, so the network stays blocked in every later replay."""
    from blockbuster import blockbuster_ctx

    server = serve(lambda seen: json_reply({}))
    agenttape.uninstall()
    unguarded = socket.socket.connect

    async def first_cassette() -> None:
        async with agenttape.use_cassette(empty_cassette):
            assert socket.socket.connect is not unguarded

    with blockbuster_ctx():
        asyncio.run(first_cassette())
    assert socket.socket.connect is unguarded  # blockbuster put back what it found
    with (
        agenttape.use_cassette(empty_cassette),
        pytest.raises(agenttape.NetworkBlockedError),
    ):
        connect("127.0.0.1", server.port)
    assert not server.seen


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_import_agenttape_imports_no_http_library() -> None:
    output = run_python(
        "import sys, agenttape\n"
        "names = ('urllib3', 'requests', 'aiohttp', 'botocore', 'httpx', 'httpx2')\n"
        "print(sorted(n for n in names if n in sys.modules))"
    )
    assert output == "[]"


def test_adapters_are_inert_when_their_library_is_missing(tmp_path: Path) -> None:
    cassette = tmp_path / "t.msgpack"
    output = run_python(
        "import sys\n"
        "for name in ('urllib3', 'requests', 'aiohttp', 'botocore', 'botocore.endpoint'):\n"
        "    sys.modules[name] = None  # as if not installed\n"
        "import agenttape\n"
        f"with agenttape.use_cassette({str(cassette)!r}, mode='all') as tape:\n"
        "    try:\n"
        "        import urllib3\n"
        "    except ImportError:\n"
        "        pass\n"
        "print(len(tape.interactions))"
    )
    assert output == "0"


def test_adapters_patch_a_library_imported_after_the_cassette_opened(
    serve: Serve, tmp_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"late": True}))
    cassette = tmp_path / "late.msgpack"
    output = run_python(
        "import sys, agenttape\n"
        f"with agenttape.use_cassette({str(cassette)!r}, mode='all') as tape:\n"
        "    assert 'urllib3' not in sys.modules\n"
        "    import urllib3\n"
        f"    urllib3.request('GET', {server.url + '/late'!r})\n"
        "print(len(tape.interactions))"
    )
    assert output == "1"


# -- datagrams and child processes ----------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A UDP socket on 127.0.0.1 that reports what reaches it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0.5)
        yield udp


def received(udp: socket.socket) -> bytes | None:
    try:
        return udp.recv(100)
    except TimeoutError:
        return None


def test_replay_blocks_udp_datagrams(empty_cassette: Path, listener: socket.socket) -> None:
    address = listener.getsockname()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with agenttape.use_cassette(empty_cassette):
            with pytest.raises(agenttape.NetworkBlockedError) as caught:
                udp.sendto(b"leak", address)
            with pytest.raises(agenttape.NetworkBlockedError):
                udp.sendto(b"leak", 0, address)
            with pytest.raises(agenttape.NetworkBlockedError):
                udp.sendmsg([b"leak"], [], 0, address)
            with pytest.raises(agenttape.NetworkBlockedError):
                udp.connect(address)
        assert "blocked a datagram to 127.0.0.1" in str(caught.value)
        assert received(listener) is None
        udp.sendto(b"after", address)  # outside the cassette nothing is blocked
        assert received(listener) == b"after"


FETCH = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"


def _fetch(url: str, outcome: Any) -> None:
    """A multiprocessing child's work: fetch ``url``, report how it ended."""
    try:
        urllib.request.urlopen(url, timeout=5)
    except Exception as exc:
        outcome.put(f"{type(exc).__name__}: {exc}")
    else:
        outcome.put("fetched")


def test_python_children_inherit_the_guard(
    serve: Serve, empty_cassette: Path, tmp_path: Path
) -> None:
    """A Python child the code under test starts is guarded as the code is: with the
    inherited environment, with an environment of its own, through a shell, through
    ``os.system``; the guard reaches each through its own environment, ``os.environ`` is
    left as it is."""
    server = serve(lambda seen: json_reply({}))
    command = [sys.executable, "-c", FETCH, server.url]
    own = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    system_err = tmp_path / "system.err"
    before = dict(os.environ)
    with agenttape.use_cassette(empty_cassette):
        assert dict(os.environ) == before
        children = [
            subprocess.run(command, capture_output=True, text=True, timeout=60),
            subprocess.run(command, capture_output=True, text=True, timeout=60, env=own),
            subprocess.run(
                shlex.join(command), shell=True, capture_output=True, text=True, timeout=60
            ),
        ]
        status = os.system(f"{shlex.join(command)} 2> {shlex.quote(str(system_err))}")
        assert dict(os.environ) == before
    assert status != 0
    stderrs = [child.stderr for child in children] + [system_err.read_text()]
    assert all(child.returncode != 0 for child in children)
    for stderr in stderrs:
        assert "NetworkBlockedError: agenttape blocked a connection to 127.0.0.1" in stderr
        assert f"cassette {empty_cassette} in the parent process" in stderr
    assert not server.seen
    assert dict(os.environ) == before
    after = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert after.returncode == 0, after.stderr
    assert os.system(shlex.join(command)) == 0
    assert len(server.seen) == 2


@pytest.mark.parametrize(
    ("method", "refusal"),
    [
        pytest.param("spawn", "agenttape blocked a connection to 127.0.0.1", id="spawn"),
        # A fork copies the process: the cassette itself is active in the child.
        pytest.param("fork", "No recorded interaction matches GET", id="fork"),
    ],
)
def test_multiprocessing_children_inherit_the_guard(
    serve: Serve, empty_cassette: Path, method: str, refusal: str
) -> None:
    server = serve(lambda seen: json_reply({}))
    context = multiprocessing.get_context(method)
    outcome = context.Queue()
    before = dict(os.environ)
    with agenttape.use_cassette(empty_cassette):
        child = context.Process(target=_fetch, args=(server.url, outcome))
        child.start()
        child.join(60)
        assert dict(os.environ) == before
    assert refusal in outcome.get(timeout=10)
    assert not server.seen
    after = context.Process(target=_fetch, args=(server.url, outcome))
    after.start()
    after.join(60)
    assert outcome.get(timeout=10) == "fetched"


def test_a_recording_cassette_leaves_children_free(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({}))
    with agenttape.use_cassette(cassette_path, mode="all"):
        child = subprocess.run(
            [sys.executable, "-c", FETCH, server.url], capture_output=True, text=True, timeout=60
        )
    assert child.returncode == 0, child.stderr
    assert len(server.seen) == 1


def test_a_recording_names_connections_no_adapter_made(serve: Serve, cassette_path: Path) -> None:
    """Nothing is bypassed in silence: a connection opened outside every adapter while
    recording is named when the cassette stops (host, port, the code that opened it), and
    "nothing was recorded" is not said when connections were made."""
    server = serve(lambda seen: json_reply({}))
    with (
        pytest.warns(agenttape.AgentTapeWarning) as caught,
        agenttape.use_cassette(cassette_path, mode="all"),
    ):
        connect("127.0.0.1", server.port)
    [message] = [str(w.message) for w in caught if "opened connections" in str(w.message)]
    assert f"127.0.0.1:{server.port} (tests)" in message
    assert not any("made no HTTP request" in str(w.message) for w in caught)


def test_a_recording_names_asyncio_and_raw_connections_no_adapter_made(
    serve: Serve, cassette_path: Path
) -> None:
    """The audit hook on ``socket.connect`` sees what a patch of ``socket.socket.connect``
    did not: asyncio's non-blocking connect and a connect on a ``_socket.socket``."""
    import _socket

    first = serve(lambda seen: json_reply({}))
    second = serve(lambda seen: json_reply({}))

    async def open_and_close() -> None:
        _reader, writer = await asyncio.open_connection("127.0.0.1", first.port)
        writer.close()
        await writer.wait_closed()

    with (
        pytest.warns(agenttape.AgentTapeWarning) as caught,
        agenttape.use_cassette(cassette_path, mode="all"),
    ):
        asyncio.run(open_and_close())
        raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        try:
            raw.connect(("127.0.0.1", second.port))
        finally:
            raw.close()
    [message] = [str(w.message) for w in caught if "opened connections" in str(w.message)]
    assert f"127.0.0.1:{first.port} (tests), 127.0.0.1:{second.port} (tests)" in message


def test_connections_made_by_adapters_are_not_named(serve: Serve, cassette_path: Path) -> None:
    import warnings

    server = serve(lambda seen: json_reply({}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with agenttape.use_cassette(cassette_path, mode="all"):
            requests.get(f"{server.url}/x", timeout=5)
            http.client.HTTPConnection("127.0.0.1", server.port, timeout=5).request("GET", "/")
    assert not [w for w in caught if "opened connections" in str(w.message)]
