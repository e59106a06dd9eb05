"""The recording proxy: real clients (curl, httpx, requests, Node) send through it to local
servers over HTTP and HTTPS; what it records is byte-exact and one format with in-process
recordings, replay never touches the network, and bad input has a clear outcome."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import requests

import agenttape
from agenttape._core.files import read, write_atomic
from agenttape._core.wire import codec
from agenttape._proxy.guard import is_loopback
from tests.cli_support import cli
from tests.proxy_support import (
    ProxyProcess,
    agenttape_ca,
    curl,
    needs_curl,
    node_env,
    record_then_replay,
)
from tests.servers import (
    HALF_JSON,
    Reply,
    Seen,
    Server,
    ended_by_a_later_request,
    gzip_reply,
    refused_port,
    sse_reply,
)

EVENTS = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]
ODD_HEADERS = [("X-Odd-Case", "A"), ("x-odd-case", "b"), ("Retry-After", "7")]


def app(seen: Seen) -> Reply:
    if seen.path == "/gz":
        return gzip_reply(b'{"ok": true}')
    if seen.path == "/sse":
        return sse_reply(EVENTS, delay=0.03)
    if seen.path == "/echo":
        return Reply(headers=[("Content-Type", "application/json")], chunks=[seen.body or b"{}"])
    return Reply(
        status=429, reason="Too Many Requests (slow down)", headers=ODD_HEADERS, chunks=[HALF_JSON]
    )


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def upstream_env(upstream_ca: tuple[object, Path]) -> dict[str, str]:
    """The proxy verifies the local TLS servers with the test CA, as it would a real API
    with the system's."""
    return {"SSL_CERT_FILE": str(upstream_ca[1])}


@needs_curl
@pytest.mark.parametrize("version", ["--http1.1", "--http2"])
def test_records_https_and_http_byte_exact_then_replays_offline(
    version: str,
    serve: Callable[..., Server],
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    cassette_path: Path,
) -> None:
    plain, secure = serve(app), serve_tls(app)
    urls = [
        f"{plain.url}/limited",
        f"{plain.url}/sse",
        f"{secure.url}/gz",
        f"{secure.url}/sse",
        f"{secure.url}/limited",
    ]
    ca = agenttape_ca()

    def run(proxy: ProxyProcess) -> list[bytes]:
        outputs = []
        for url in urls:
            result = curl(version, url, proxy=proxy.url, ca=ca)
            assert result.returncode == 0, result.stderr
            outputs.append(result.stdout)
        return outputs

    live, replayed = record_then_replay(
        start_proxy, cassette_path, run, [plain, secure], upstream_env(upstream_ca)
    )
    assert replayed == live  # every byte curl saw, status line and chunk framing included

    tape = agenttape.load(cassette_path)
    assert [i.request.url for i in tape.interactions] == urls
    limited, sse = tape.interactions[0].response, tape.interactions[3].response
    assert limited is not None and sse is not None
    assert limited.status == 429 and limited.reason == "Too Many Requests (slow down)"
    assert limited.headers == [*ODD_HEADERS, ("Content-Length", str(len(HALF_JSON)))]
    assert limited.body == HALF_JSON
    gz = tape.interactions[2].response
    assert gz is not None and gz.body == gzip.compress(b'{"ok": true}', mtime=0)  # still gzip
    assert ("Content-Encoding", "gzip") in gz.headers
    assert [size for size, _offset in sse.chunks] == [len(event) for event in EVENTS]
    offsets = [offset for _size, offset in sse.chunks]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] >= 0.05
    assert b"".join(EVENTS) == sse.body
    if version == "--http1.1":
        head = live[0].split(b"\r\n\r\n", 1)[0]
        assert head.endswith(
            b"HTTP/1.1 429 Too Many Requests (slow down)\r\nX-Odd-Case: A\r\nx-odd-case: b\r\n"
            b"Retry-After: 7\r\nContent-Length: 73"
        )
        assert live[1].endswith(
            b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"
        )
    else:  # curl asked for HTTP/2; the server spoke HTTP/1.1, and so does the proxy
        assert b"\r\n\r\nHTTP/1.1 429 Too Many Requests (slow down)\r\nX-Odd-Case: A" in live[4]
        assert live[3].endswith(
            b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"
        )


def test_a_proxy_recording_equals_an_in_process_recording(
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    tmp_path: Path,
) -> None:
    """The same server recorded by httpx in-process and by httpx through the proxy: the same
    status, reason, headers, raw body and chunk boundaries."""
    server = serve_tls(app)
    paths = ["/limited", "/gz", "/sse"]
    in_process = tmp_path / "in_process.msgpack"
    with (
        agenttape.use_cassette(in_process, mode="all"),
        httpx.Client(verify=trusting(upstream_ca[1])) as client,
    ):
        for path in paths:
            client.get(server.url + path)
    through = tmp_path / "proxy.msgpack"
    proxy = start_proxy("--cassette", through, "--mode", "all", env=upstream_env(upstream_ca))
    with httpx.Client(proxy=proxy.url, verify=trusting(agenttape_ca())) as client:
        for path in paths:
            client.get(server.url + path)
    assert proxy.stop() == 0, proxy.stderr

    def responses(path: Path) -> list[tuple[object, ...]]:
        out = []
        for interaction in agenttape.load(path).interactions:
            r = interaction.response
            assert r is not None
            out.append(
                (
                    interaction.request.url,
                    r.status,
                    r.reason,
                    r.http_version,
                    r.headers,
                    r.body,
                    [s for s, _ in r.chunks],
                )
            )
        return out

    assert responses(through) == responses(in_process)


def test_a_cassette_recorded_through_the_proxy_replays_in_process(
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    cassette_path: Path,
) -> None:
    server = serve_tls(app)
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all", env=upstream_env(upstream_ca))
    proxies = {"https": proxy.url, "http": proxy.url}
    ca = str(agenttape_ca())
    live = [
        requests.get(f"{server.url}/limited", proxies=proxies, verify=ca),
        requests.post(f"{server.url}/echo", json={"q": 1}, proxies=proxies, verify=ca),
        requests.get(f"{server.url}/gz", proxies=proxies, verify=ca),
    ]
    assert proxy.stop() == 0, proxy.stderr
    server.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = [
            requests.get(f"{server.url}/limited", verify=str(upstream_ca[1])),
            requests.post(f"{server.url}/echo", json={"q": 1}, verify=str(upstream_ca[1])),
            httpx.get(f"{server.url}/gz", verify=trusting(upstream_ca[1])),
        ]
        assert tape.all_played
    assert [(r.status_code, r.content) for r in replayed] == [
        (r.status_code, r.content) for r in live
    ]
    assert replayed[0].reason == "Too Many Requests (slow down)"
    assert replayed[2].json() == {"ok": True}


@needs_curl
def test_a_cassette_recorded_in_process_replays_through_the_proxy(
    serve: Callable[..., Server], tmp_path: Path, node_modules: Path
) -> None:
    """Recorded by httpx in this process; replayed to curl (HTTP and HTTPS) and to Node's
    fetch by agenttape run, the server stopped."""
    server = serve(app)
    cassette = tmp_path / "tape.msgpack"
    with agenttape.use_cassette(cassette, mode="all"):
        limited = httpx.get(f"{server.url}/limited")
        echo = httpx.post(f"{server.url}/echo", content=b'{"q": 1}')
        with httpx.stream("GET", f"{server.url}/sse") as stream:
            events = list(stream.iter_raw())
        limited_again = httpx.get(f"{server.url}/limited")
    server.stop()
    assert events == EVENTS

    script = (
        f"curl -sS -i {server.url}/limited && "
        f"curl -sS -d '{{\"q\": 1}}' {server.url}/echo && "
        f"curl -sS {server.url}/sse"
    )
    result = cli("run", "--cassette", cassette, "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "HTTP/1.1 429 Too Many Requests (slow down)\nX-Odd-Case: A\nx-odd-case: b\n"
    )
    assert result.stdout.endswith(HALF_JSON.decode() + echo.text + b"".join(EVENTS).decode())
    program = tmp_path / "fetch.mjs"
    program.write_text(
        f"const r = await fetch('{server.url}/limited');\n"
        "console.log(r.status, r.statusText, r.headers.get('x-odd-case'), await r.text());\n"
    )
    node = cli("run", "--cassette", cassette, "--", "node", program, env=node_env(node_modules))
    assert node.returncode == 0, node.stderr
    assert node.stdout == f"429 Too Many Requests (slow down) A, b {HALF_JSON.decode()}\n"
    assert limited.content == limited_again.content == HALF_JSON


@needs_curl
def test_run_records_curl_and_replays_it_offline(
    serve_tls: Callable[..., Server], upstream_ca: tuple[object, Path], tmp_path: Path
) -> None:
    server = serve_tls(app)
    recorded = cli(
        "run",
        "--mode",
        "once",
        "--",
        "curl",
        "-sS",
        f"{server.url}/gz",
        "-o",
        "gz.bin",
        cwd=tmp_path,
        env=upstream_env(upstream_ca),
    )
    assert recorded.returncode == 0, recorded.stderr
    assert "recorded 1 interaction through the proxy" in recorded.stderr
    server.stop()
    cassette = tmp_path / "cassettes" / "curl.msgpack"  # named after the program
    assert agenttape.load(cassette).interactions[0].request.url == f"{server.url}/gz"
    (tmp_path / "gz.bin").unlink()
    replayed = cli("run", "--", "curl", "-sS", f"{server.url}/gz", "-o", "gz.bin", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert (tmp_path / "gz.bin").read_bytes() == gzip.compress(b'{"ok": true}', mtime=0)


def test_http2_clients_get_the_protocol_the_server_spoke(
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    cassette_path: Path,
) -> None:
    """A client offering HTTP/2 gets HTTP/1.1 from a server that speaks it, live and on
    replay; a recording that holds HTTP/2 answers is replayed over HTTP/2."""
    server = serve_tls(app)
    ca = trusting(agenttape_ca())

    def run(proxy: ProxyProcess) -> list[tuple[str, int, bytes, list[bytes]]]:
        out = []
        with httpx.Client(proxy=proxy.url, verify=ca, http2=True) as client:
            for path in ("/limited", "/gz"):
                response = client.get(server.url + path)
                out.append((response.http_version, response.status_code, response.content, []))
            with client.stream("GET", server.url + "/sse") as response:
                out.append(
                    (response.http_version, response.status_code, b"", list(response.iter_raw()))
                )
        return out

    live, replayed = record_then_replay(
        start_proxy, cassette_path, run, [server], upstream_env(upstream_ca)
    )
    assert replayed == live
    assert [v for v, *_ in live] == ["HTTP/1.1", "HTTP/1.1", "HTTP/1.1"]
    assert live[1][2] == b'{"ok": true}'  # httpx undid the gzip the proxy passed through
    assert b"".join(live[2][3]) == b"".join(EVENTS)

    # The same answers recorded from a server that spoke HTTP/2 (as httpx records one
    # in-process): replayed over HTTP/2.
    header, interactions = read(cassette_path)
    spoken = [
        dataclasses.replace(
            i,
            response=dataclasses.replace(
                i.response,
                http_version="HTTP/2",
                reason="",
                headers=[(n.lower(), v) for n, v in i.response.headers],
            ),
        )
        for i in interactions
        if i.response is not None
    ]
    write_atomic(cassette_path, codec.encode_pieces(header, spoken))
    replaying = start_proxy("--cassette", cassette_path)
    over_h2 = run(replaying)
    assert replaying.stop() == 0, replaying.stderr
    assert [v for v, *_ in over_h2] == ["HTTP/2", "HTTP/2", "HTTP/2"]
    assert [(status, body, b"".join(raw)) for _v, status, body, raw in over_h2] == [
        (status, body, b"".join(raw)) for _v, status, body, raw in live
    ]


def test_base_url_mode_records_the_upstream_url(
    standin: object, start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    import openai

    base = standin.url  # type: ignore[attr-defined]
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all", "--upstream", base)
    assert f"base URL: {proxy.url} forwards to {base}" in proxy.banner

    def ask(base_url: str) -> str:
        client = openai.OpenAI(
            base_url=base_url, api_key="sk-test-key-1234567890abcdef", max_retries=0
        )
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}], stream=True
        )
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    live = ask(f"{proxy.url}/v1")
    assert proxy.stop() == 0, proxy.stderr
    standin.stop()  # type: ignore[attr-defined]
    interaction = agenttape.load(cassette_path).interactions[0]
    assert interaction.request.url == f"{base}/v1/chat/completions"
    assert interaction.request.header("authorization") == "<redacted>"
    assert ("Host", base.removeprefix("http://")) in interaction.request.headers or (
        "host",
        base.removeprefix("http://"),
    ) in interaction.request.headers
    with agenttape.use_cassette(cassette_path):
        assert ask(f"{base}/v1") == live  # in-process, at the URL the cassette names
    replaying = start_proxy("--cassette", cassette_path, "--upstream", base)
    assert ask(f"{replaying.url}/v1") == live
    assert replaying.stop() == 0, replaying.stderr


@needs_curl
def test_python_processes_under_run_are_recorded_once(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(app)
    script = tmp_path / "ask.py"
    script.write_text(
        "import os, urllib.request, httpx, requests\n"
        "assert os.environ['HTTPS_PROXY'].startswith('http://127.0.0.1:')\n"
        "assert urllib.request.getproxies() == {'no': 'example.internal'}  # the user's own\n"
        "print(httpx.get(os.environ['API'] + '/gz').json(), requests.get(os.environ['API'] + '/limited').status_code)\n"
    )
    cassette = tmp_path / "tape.msgpack"
    command = f"python3 {script} && curl -sS $API/echo -d '[1]'"
    env = {
        "NO_PROXY": "example.internal",
        "API": server.url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    recorded = cli(
        "run", "--cassette", cassette, "--mode", "all", "--", "sh", "-c", command, env=env
    )
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == "{'ok': True} 429\n[1]"
    assert "recorded 3 interactions from 1 process and 1 through the proxy" in recorded.stderr
    assert len(server.seen) == 3
    server.stop()
    replayed = cli("run", "--cassette", cassette, "--", "sh", "-c", command, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout


@needs_curl
def test_a_miss_answers_599_and_fails_the_run(serve: Callable[..., Server], tmp_path: Path) -> None:
    server = serve(app)
    cassette = tmp_path / "tape.msgpack"
    recorded = cli(
        "run", "--cassette", cassette, "--mode", "all", "--", "curl", "-sS", f"{server.url}/limited"
    )
    assert recorded.returncode == 0, recorded.stderr
    server.stop()
    before = cassette.read_bytes()
    missed = cli(
        "run", "--cassette", cassette, "--", "curl", "-sS", "-i", f"{server.url}/limitless"
    )
    assert missed.returncode == 1
    assert missed.stdout.startswith("HTTP/1.1 599 No Recorded Interaction\n")
    body = json.loads(missed.stdout.split("\n\n", 1)[1])
    assert body["error"]["code"] == "unmatched_interaction"
    assert "url.path: expected '/limited', got '/limitless'" in body["error"]["message"]
    assert "1 request through the proxy had no recorded interaction" in missed.stderr
    assert f"No recorded interaction matches GET {server.url}/limitless" in missed.stderr
    assert "url.path: expected '/limited', got '/limitless'" in missed.stderr
    assert cassette.read_bytes() == before


# -- bad input ---------------------------------------------------------------------------------


def _reset_midstream_server() -> tuple[int, threading.Thread]:
    """Sends a head announcing 100 bytes and 10 of them, then resets the connection."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            for _ in range(1):
                conn, _ = listener.accept()
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                time.sleep(0.2)
                conn.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


@needs_curl
def test_an_upstream_reset_mid_stream_is_kept_and_replayed(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    good = serve(app)
    port, thread = _reset_midstream_server()
    cassette = tmp_path / "tape.msgpack"
    script = f'curl -sS {good.url}/gz -o /dev/null; curl -sS http://127.0.0.1:{port}/cut; echo " curl=$?"'
    recorded = cli("run", "--cassette", cassette, "--mode", "all", "--", "sh", "-c", script)
    thread.join(5)
    good.stop()
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.startswith("0123456789") and "curl=0" not in recorded.stdout
    first, cut = agenttape.load(cassette).interactions  # nothing recorded before it is lost
    assert first.response is not None and first.response.status == 200
    assert cut.response is not None and cut.response.body == b"0123456789"
    assert cut.error is not None and cut.error.kind == "read_error" and cut.response.truncated
    replayed = cli("run", "--cassette", cassette, "--", "sh", "-c", script)
    assert replayed.stdout == recorded.stdout
    with agenttape.use_cassette(cassette), pytest.raises(httpx.ReadError):
        httpx.get(f"http://127.0.0.1:{port}/cut")


@needs_curl
def test_a_connect_to_a_refusing_port_is_recorded_as_a_connect_error(
    tmp_path: Path, start_proxy: Callable[..., ProxyProcess]
) -> None:
    port = refused_port()
    cassette = tmp_path / "tape.msgpack"
    ca = agenttape_ca()
    recording = start_proxy("--cassette", cassette, "--mode", "all")
    live = curl(f"https://127.0.0.1:{port}/v1", proxy=recording.url, ca=ca)
    assert recording.stop() == 0
    assert live.returncode != 0
    assert "connect_error" in recording.stderr and "refused" in recording.stderr
    (interaction,) = agenttape.load(cassette).interactions
    assert interaction.response is None and interaction.error is not None
    assert interaction.error.kind == "connect_error"
    replaying = start_proxy("--cassette", cassette)
    again = curl(f"https://127.0.0.1:{port}/v1", proxy=replaying.url, ca=ca)
    assert replaying.stop() == 0
    assert again.returncode == live.returncode != 0
    assert again.stdout == live.stdout  # the tunnel opened, then the connection failed
    with agenttape.use_cassette(cassette), pytest.raises(httpx.ConnectError):
        httpx.get(f"https://127.0.0.1:{port}/v1")


@needs_curl
def test_an_upstream_that_never_answers_is_replayed_as_a_timeout(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(lambda seen: Reply(stall=5, chunks=[b"late"]))
    cassette = tmp_path / "tape.msgpack"
    command = ["curl", "-sS", "--max-time", "1", f"{server.url}/slow"]
    recorded = cli("run", "--cassette", cassette, "--mode", "all", "--", *command)
    assert recorded.returncode == 28, recorded.stderr  # curl's own timeout
    (interaction,) = agenttape.load(cassette).interactions
    assert interaction.error is not None and interaction.error.kind == "read_timeout"
    server.stop()
    started = time.monotonic()
    replayed = cli("run", "--cassette", cassette, "--", *command)
    assert replayed.returncode == 28
    assert time.monotonic() - started >= 1  # no answer until curl gave up
    with agenttape.use_cassette(cassette), pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{server.url}/slow")


@needs_curl
def test_a_client_that_does_not_trust_the_ca_is_told_how(
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    tmp_path: Path,
) -> None:
    server = serve_tls(app)
    cassette = tmp_path / "tape.msgpack"
    proxy = start_proxy("--cassette", cassette, "--mode", "all", env=upstream_env(upstream_ca))
    distrusting = curl(f"{server.url}/gz", proxy=proxy.url, ca=upstream_ca[1])  # not agenttape's CA
    trusting = curl(f"{server.url}/gz", proxy=proxy.url, ca=agenttape_ca())
    assert proxy.stop() == 0
    assert distrusting.returncode == 60  # curl: peer certificate cannot be authenticated
    assert trusting.returncode == 0
    assert "does not trust the agenttape CA" in proxy.stderr
    assert "agenttape proxy --print-ca" in proxy.stderr
    assert len(agenttape.load(cassette).interactions) == 1  # the trusting client's request


def test_the_proxy_serves_this_machine_only(
    start_proxy: Callable[..., ProxyProcess], tmp_path: Path
) -> None:
    proxy = start_proxy("--cassette", tmp_path / "tape.msgpack", "--mode", "all")
    addresses = {
        info[4][0]
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        if not info[4][0].startswith("127.")
    }
    for address in addresses:  # this machine's other addresses: nothing listens there
        with pytest.raises(OSError):
            socket.create_connection((address, proxy.port), timeout=2).close()
    assert is_loopback("127.0.0.1") and is_loopback("::1")
    assert not is_loopback("10.1.2.3") and not is_loopback("192.168.0.2")
    assert proxy.stop() == 0


def test_the_ca_is_made_once_with_a_private_key(tmp_path: Path) -> None:
    config = tmp_path / "config"
    env = {"AGENTTAPE_CONFIG_DIR": str(config)}
    first = cli("proxy", "--print-ca", env=env)
    second = cli("proxy", "--print-ca", env=env)
    assert first.returncode == 0 and first.stdout == second.stdout == f"{config / 'ca-cert.pem'}\n"
    assert stat.S_IMODE((config / "ca-key.pem").stat().st_mode) == 0o600
    assert b"PRIVATE KEY" not in (config / "ca-cert.pem").read_bytes()


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    from tests.cli_support import assert_one_line_error

    assert_one_line_error(cli("proxy", "--upstream", "ftp://x"), "--upstream")
    assert_one_line_error(cli("proxy", "--port", "70000"), "--port")
    assert_one_line_error(cli("proxy", "--route", "nonsense"), "FROM=TO")
    assert_one_line_error(
        cli("proxy", "--cassette", tmp_path / "missing.msgpack"), "does not exist"
    )


# -- streaming ---------------------------------------------------------------------------------


def test_sse_passes_through_chunk_by_chunk_while_recording(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    gate = threading.Event()
    server = serve(
        lambda seen: Reply(
            headers=[("Content-Type", "text/event-stream")], chunks=EVENTS, chunked=True, gate=gate
        )
    )
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all")
    with (
        httpx.Client(proxy=proxy.url) as client,
        client.stream("GET", f"{server.url}/sse") as response,
    ):
        pieces = response.iter_raw()
        assert next(pieces) == EVENTS[0]  # arrived while the server still held the rest
        gate.set()
        assert list(pieces) == EVENTS[1:]
    assert proxy.stop() == 0
    response_ = agenttape.load(cassette_path).interactions[0].response
    assert response_ is not None and [s for s, _ in response_.chunks] == [len(e) for e in EVENTS]


def test_a_stream_the_client_closed_early_is_recorded_and_held_open_on_replay(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    server = serve(lambda seen: Reply(chunks=EVENTS, chunked=True, delay=0.5))
    recording = start_proxy("--cassette", cassette_path, "--mode", "all")
    with (
        httpx.Client(proxy=recording.url) as client,
        client.stream("GET", f"{server.url}/sse") as response,
    ):
        assert next(response.iter_raw()) == EVENTS[0]
    time.sleep(0.2)
    assert recording.stop() == 0
    server.stop()
    interaction = agenttape.load(cassette_path).interactions[0]
    assert interaction.response is not None and interaction.response.truncated
    assert interaction.error is None and interaction.response.body == EVENTS[0]
    replaying = start_proxy("--cassette", cassette_path)
    timeout = httpx.Timeout(5, read=1.5)
    with (
        httpx.Client(proxy=replaying.url, timeout=timeout) as client,
        client.stream("GET", f"{server.url}/sse") as response,
    ):
        pieces = response.iter_raw()
        assert next(pieces) == EVENTS[0]
        with pytest.raises(httpx.ReadTimeout):  # held open, never a clean end
            next(pieces)
    assert replaying.stop() == 0


@needs_curl
def test_a_stream_closed_after_its_end_event_ends_on_replay(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    """Recorded by a reader that stops at ``data: [DONE]`` (as the Python openai SDK does);
    replayed to readers that read on to the end (curl, the openai npm SDK): it ends there."""
    server = serve(lambda seen: sse_reply(EVENTS, delay=0.2))
    cassette = tmp_path / "tape.msgpack"
    with agenttape.use_cassette(cassette, mode="all"), httpx.stream("GET", server.url) as response:
        for piece in response.iter_raw():
            if b"[DONE]" in piece:
                break
    server.stop()
    recorded = agenttape.load(cassette).interactions[0].response
    assert recorded is not None and recorded.truncated and recorded.body == b"".join(EVENTS)
    with agenttape.use_cassette(cassette):
        assert httpx.get(server.url, timeout=2).content == b"".join(EVENTS)
    replayed = cli(
        "run", "--cassette", cassette, "--", "curl", "-sS", "--max-time", "5", server.url
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == b"".join(EVENTS).decode()


@pytest.mark.parametrize("http2", [False, True])
def test_concurrent_clients_and_streams(
    http2: bool,
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    cassette_path: Path,
) -> None:
    """Eight clients at once: over HTTP/1.1 eight threads share one client (a connection
    each); over HTTP/2 eight tasks share one async client, their requests multiplexed as
    streams of one connection."""
    server = serve_tls(lambda seen: Reply(chunks=[seen.path.encode()], delay=0.01))
    ca = trusting(agenttape_ca())

    def path(n: int, k: int) -> str:
        return f"{server.url}/item/{n}/{k}"

    def run(proxy: ProxyProcess) -> list[bytes]:
        if http2:
            return asyncio.run(run_async(proxy))
        with httpx.Client(proxy=proxy.url, verify=ca) as client:

            def fetch(n: int) -> bytes:
                return b"".join(client.get(path(n, k)).content for k in range(5))

            with ThreadPoolExecutor(8) as pool:
                return list(pool.map(fetch, range(8)))

    async def run_async(proxy: ProxyProcess) -> list[bytes]:
        async with httpx.AsyncClient(proxy=proxy.url, verify=ca, http2=True) as client:

            async def fetch(n: int) -> bytes:
                return b"".join([(await client.get(path(n, k))).content for k in range(5)])

            return list(await asyncio.gather(*(fetch(n) for n in range(8))))

    live, replayed = record_then_replay(
        start_proxy, cassette_path, run, [server], upstream_env(upstream_ca)
    )
    assert replayed == live
    assert len(agenttape.load(cassette_path).interactions) == 40
    assert live[3] == b"".join(f"/item/3/{k}".encode() for k in range(5))


@needs_curl
def test_uploads_and_http2_prior_knowledge_in_base_url_mode(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    server = serve(app)
    body = json.dumps({"text": "x" * 5000}).encode()
    recording = start_proxy("--cassette", cassette_path, "--mode", "all", "--upstream", server.url)
    posted = subprocess.run(
        [
            "curl",
            "-sS",
            "-H",
            "Expect: 100-continue",
            "--data-binary",
            "@-",
            f"{recording.url}/echo",
        ],
        input=body,
        capture_output=True,
        check=False,
    )
    h2c = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", f"{recording.url}/gz", "-o", "-"],
        capture_output=True,
        check=False,
    )
    assert recording.stop() == 0, recording.stderr
    assert posted.stdout == body
    assert h2c.returncode == 0 and h2c.stdout == gzip.compress(b'{"ok": true}', mtime=0)
    urls = [i.request.url for i in agenttape.load(cassette_path).interactions]
    assert urls[-2:] == [f"{server.url}/echo", f"{server.url}/gz"]


@needs_curl
def test_new_episodes_replays_what_is_recorded_and_adds_the_rest(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    server = serve(app)
    first = start_proxy("--cassette", cassette_path, "--mode", "all")
    assert curl(f"{server.url}/limited", proxy=first.url).returncode == 0
    assert first.stop() == 0
    second = start_proxy("--cassette", cassette_path, "--mode", "new_episodes")
    replayed = curl(f"{server.url}/limited", proxy=second.url)
    added = curl(f"{server.url}/gz", proxy=second.url)
    assert second.stop() == 0, second.stderr
    assert replayed.returncode == added.returncode == 0
    assert [s.path for s in server.seen] == ["/limited", "/gz"]  # the first one was replayed
    urls = [i.request.url for i in agenttape.load(cassette_path).interactions]
    assert urls == [f"{server.url}/limited", f"{server.url}/gz"]


def test_a_stream_the_server_ended_at_a_later_request_ends_after_it_on_replay(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    """Through the proxy too, a stream the server ended when the client POSTed ends after
    that POST on replay, not with its last chunk."""
    server = serve(ended_by_a_later_request())
    recording = start_proxy("--cassette", cassette_path, "--mode", "all")
    with (
        httpx.Client(proxy=recording.url, timeout=5) as client,
        client.stream("GET", f"{server.url}/events") as response,
    ):
        chunks = response.iter_raw()
        assert next(chunks) == b"data: 1\n\n"
        time.sleep(0.5)
        assert client.post(f"{server.url}/close").json() == {"closed": True}
        assert list(chunks) == []
    assert recording.stop() == 0
    server.stop()

    replaying = start_proxy("--cassette", cassette_path)
    order: list[str] = []
    with (
        httpx.Client(proxy=replaying.url, timeout=5) as client,
        client.stream("GET", f"{server.url}/events") as response,
    ):

        def read() -> None:
            order.extend(chunk.decode() for chunk in response.iter_raw())
            order.append("end")

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.1)  # less than live: the end is due after the POST
        order.append("post")
        assert client.post(f"{server.url}/close").json() == {"closed": True}
        reader.join(5)
    assert replaying.stop() == 0
    assert order == ["data: 1\n\n", "post", "end"]
