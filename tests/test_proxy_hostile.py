"""The recording proxy against hostile input, over real sockets to a real proxy on 127.0.0.1:
request smuggling, DNS rebinding and web pages, WebSocket decompression bombs, and a CA
another local user could swap."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agenttape
from tests.cli_support import AGENTTAPE
from tests.proxy_support import ProxyProcess
from tests.servers import RawServer, Reply, Seen, Server, read_head


class NaiveUpstream(RawServer):
    """A server that frames requests by ``Content-Length`` alone, as many do, and answers
    each request it reads with 200 ``ok``: it lists every request line it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        super().__init__(self._answer_each)

    def _answer_each(self, sock: socket.socket) -> None:
        buffer = b""
        while True:
            request = read_head(sock, buffer)
            if request is None:
                return
            head, buffer = request
            lines = head.decode("latin-1").split("\r\n")
            self.seen.append(lines[0].split(" ")[1])
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.split(",")[0].strip() or 0)
            while len(buffer) < length:
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
            buffer = buffer[length:]
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def naive() -> Iterator[NaiveUpstream]:
    upstream = NaiveUpstream()
    yield upstream
    upstream.stop()


def exchange(port: int, raw: bytes) -> bytes:
    """Sends ``raw`` to the proxy and reads until it closes the connection (or 3 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        sock.sendall(raw)
        answer = b""
        try:
            while data := sock.recv(65536):
                answer += data
        except (TimeoutError, ConnectionResetError):
            pass
    return answer


SMUGGLED = b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

AMBIGUOUS = {
    "content-length and chunked": (
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(SMUGGLED),
        SMUGGLED,
    ),
    "chunked and content-length": (
        b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(SMUGGLED),
        SMUGGLED,
    ),
    "two lengths": (b"Content-Length: 3\r\nContent-Length: %d\r\n" % len(SMUGGLED), SMUGGLED),
    "a coding before chunked": (b"Transfer-Encoding: gzip, chunked\r\n", SMUGGLED),
}


@pytest.mark.parametrize("framing", list(AMBIGUOUS))
@pytest.mark.parametrize("form", ["base-url", "absolute"])
def test_ambiguous_framing_gets_400_and_is_never_forwarded_or_recorded(
    framing: str,
    form: str,
    naive: NaiveUpstream,
    start_proxy: Callable[..., ProxyProcess],
    cassette_path: Path,
) -> None:
    extra = ("--upstream", naive.url) if form == "base-url" else ()
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all", *extra)
    target = "/a" if form == "base-url" else f"{naive.url}/a"
    headers, body = AMBIGUOUS[framing]
    raw = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%b\r\n%b" % (
        target.encode(),
        proxy.port,
        headers,
        body,
    )
    answer = exchange(proxy.port, raw)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert answer.count(b"HTTP/1.1") == 1  # nothing after the refusal: the connection closed
    # The proxy still serves an honest request.
    honest = exchange(
        proxy.port,
        b"GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n"
        % (target.encode(), proxy.port),
    )
    assert honest.startswith(b"HTTP/1.1 200 OK") and honest.endswith(b"ok")
    assert proxy.stop() == 0, proxy.stderr
    assert naive.seen == ["/a"]  # the honest request only: no /smuggled, no refused POST
    assert [i.request.method for i in agenttape.load(cassette_path).interactions] == ["GET"]


def app(seen: Seen) -> Reply:
    return Reply(headers=[("Content-Type", "application/json")], chunks=[b'{"secret": "yes"}'])


def ask(port: int, host: str, extra: bytes = b"") -> bytes:
    return exchange(
        port,
        b"GET /v1/conversation HTTP/1.1\r\nHost: %b\r\n%bConnection: close\r\n\r\n"
        % (host.encode(), extra),
    )


def test_base_url_mode_answers_this_machine_only_while_recording_and_replaying(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    server = serve(app)
    recording = start_proxy("--cassette", cassette_path, "--mode", "all", "--upstream", server.url)
    port = recording.port
    rebound = ask(port, f"attacker.example:{port}")
    page = ask(
        port, f"127.0.0.1:{port}", b"Sec-Fetch-Site: cross-site\r\nOrigin: http://x.example\r\n"
    )
    nameless = exchange(port, b"GET /v1/conversation HTTP/1.0\r\n\r\n")
    honest = ask(port, f"127.0.0.1:{port}")
    assert recording.stop() == 0, recording.stderr
    for refused in (rebound, page, nameless):
        assert refused.startswith(b"HTTP/1.1 403 "), refused
        assert b"secret" not in refused
    assert honest.startswith(b"HTTP/1.1 200 ") and honest.endswith(b'{"secret": "yes"}')
    assert len(agenttape.load(cassette_path).interactions) == 1  # only the honest request
    assert "attacker.example" in recording.stderr
    server.stop()

    replaying = start_proxy("--cassette", cassette_path, "--upstream", server.url, "--mode", "none")
    port = replaying.port
    for host in (
        f"attacker.example:{port}",
        f"localhost.attacker.example:{port}",
        "127.0.0.1.nip.io",
    ):
        refused = ask(port, host)
        assert refused.startswith(b"HTTP/1.1 403 "), refused
        assert b"secret" not in refused
    replayed = ask(port, f"localhost:{port}")  # this machine's name: served
    assert replayed.endswith(b'{"secret": "yes"}'), replayed
    assert replaying.stop() == 0, replaying.stderr


def test_forward_mode_refuses_what_is_neither_absolute_form_nor_connect(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    server = serve(app)
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all")
    rebound = ask(proxy.port, f"attacker.example:{proxy.port}")
    assert rebound.startswith(b"HTTP/1.1 400 ") and b"secret" not in rebound
    forwarded = exchange(
        proxy.port,
        b"GET %b/v1/conversation HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        % server.url.encode(),
    )
    assert forwarded.endswith(b'{"secret": "yes"}')
    assert proxy.stop() == 0, proxy.stderr
    assert len(agenttape.load(cassette_path).interactions) == 1


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _ws_frame(payload: bytes, *, opcode: int = 0x2, rsv1: bool = False, fin: bool = True) -> bytes:
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    mask = b"\x01\x02\x03\x04"
    size = len(payload)
    if size < 126:
        head = bytes([first, 0x80 | size])
    elif size < 1 << 16:
        head = bytes([first, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([first, 0x80 | 127]) + size.to_bytes(8, "big")
    key = (mask * (size // 4 + 1))[:size]
    body = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")
    return head + mask + body


class DrainingWebSocketServer(RawServer):
    """Accepts a WebSocket upgrade with permessage-deflate and counts the bytes that follow
    without inflating them."""

    def __init__(self) -> None:
        self.received = 0
        super().__init__(self._drain)

    def _drain(self, sock: socket.socket) -> None:
        request = read_head(sock)
        if request is None:
            return
        sock.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
            b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
        )
        self.received = len(request[1])
        while data := sock.recv(1 << 20):
            self.received += len(data)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_websocket_decompression_bomb_is_bounded(
    start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    """A permessage-deflate message of ~1 MiB inflating to 1 GiB: the proxy's memory stays
    far below it, the bytes still pass to the server, and the recording is marked cut."""
    server = DrainingWebSocketServer()
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all")
    url = f"http://127.0.0.1:{server.port}/v1/realtime"
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    bomb = b"".join(compressor.compress(block) for _ in range(1024))
    bomb += compressor.flush(zlib.Z_SYNC_FLUSH)
    assert bomb.endswith(b"\x00\x00\xff\xff")
    bomb = bomb[:-4]
    assert len(bomb) < 2 << 20
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(
            f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 101 "), head
        assert b"permessage-deflate" in head.lower()
        frame = _ws_frame(bomb, rsv1=True)
        sock.sendall(frame)
        # The proxy relays a read before it parses it: a frame sent after the bomb reaches
        # the server once the bomb has been parsed.
        ping = _ws_frame(b"after", opcode=0x9)
        time.sleep(0.5)
        sock.sendall(ping)
        deadline = time.monotonic() + 60
        while server.received < len(frame) + len(ping) and time.monotonic() < deadline:
            time.sleep(0.05)
        peak = _peak_rss_kib(proxy.process.pid)
    assert server.received == len(frame) + len(ping)  # the bytes passed, untouched
    assert proxy.stop() == 0, proxy.stderr
    assert peak < 256 * 1024, f"the proxy reached {peak >> 10} MiB"
    session = agenttape.load(cassette_path).interactions[0]
    assert session.response is not None and session.response.truncated  # marked cut


def test_the_ca_files_are_the_users_alone_whatever_the_umask_and_folder(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir(mode=0o777)
    os.chmod(config, 0o777)  # a folder others can write (another user could swap files there)
    result = subprocess.run(
        [str(AGENTTAPE), "proxy", "--print-ca"],
        capture_output=True,
        text=True,
        env={**os.environ, "AGENTTAPE_CONFIG_DIR": str(config)},
        umask=0,  # set by the child after fork in C: Python code there can abort beside threads
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o700  # made the user's alone
    for name in ("ca-cert.pem", "ca-key.pem"):
        mode = stat.S_IMODE((config / name).stat().st_mode)
        assert mode & 0o077 == 0, f"{name} is {oct(mode)}"


def test_a_ca_file_others_could_have_swapped_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config"
    env = {**os.environ, "AGENTTAPE_CONFIG_DIR": str(config)}
    subprocess.run(
        [str(AGENTTAPE), "proxy", "--print-ca"], env=env, check=True, capture_output=True
    )
    os.chmod(config / "ca-cert.pem", 0o666)
    result = subprocess.run(
        [str(AGENTTAPE), "proxy", "--print-ca"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode != 0
    assert "ca-cert.pem" in result.stderr and "writable" in result.stderr
    assert "Traceback" not in result.stderr


def test_base_url_mode_refuses_a_rebound_host_over_http2_too(
    serve: Callable[..., Server], start_proxy: Callable[..., ProxyProcess], cassette_path: Path
) -> None:
    """HTTP/2 with prior knowledge (h2c) in base-URL mode: ``:authority`` is checked as
    ``Host`` is."""
    import h2.config
    import h2.connection
    import h2.events

    server = serve(app)
    proxy = start_proxy("--cassette", cassette_path, "--mode", "all", "--upstream", server.url)

    def ask_h2(authority: str) -> tuple[bytes, bytes]:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(
            1,
            [
                (":method", "GET"),
                (":path", "/v1/conversation"),
                (":scheme", "http"),
                (":authority", authority),
            ],
            end_stream=True,
        )
        status, body = b"", b""
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            sock.sendall(conn.data_to_send())
            ended = False
            while not ended and (data := sock.recv(65536)):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = dict(event.headers)[b":status"]
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                    elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                        ended = True
                sock.sendall(conn.data_to_send())
        return status, body

    refused = ask_h2(f"attacker.example:{proxy.port}")
    served = ask_h2(f"127.0.0.1:{proxy.port}")
    assert proxy.stop() == 0, proxy.stderr
    assert refused[0] == b"403" and b"secret" not in refused[1]
    assert served == (b"200", b'{"secret": "yes"}')
    assert len(agenttape.load(cassette_path).interactions) == 1
