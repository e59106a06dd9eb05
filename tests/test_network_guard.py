"""The network guard: in replay, a connection no cassette serves fails loudly and names the
host; an allow-list lets chosen hosts through. Also: adapters stay out of the way of a
process that never imports their library."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    server = serve(lambda seen: json_reply({}))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    with (
        agenttape.use_cassette(empty_cassette),
        pytest.raises(agenttape.NetworkBlockedError) as caught,
    ):
        connection.request("GET", "/")
    assert caught.value.host == "127.0.0.1"
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
