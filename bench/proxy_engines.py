"""The recording proxy against mitmproxy, the measurement behind the engine chosen in
docs/proxy.md: median latency of a small GET and of the first SSE chunk on loopback, over HTTP
and HTTPS, direct, through ``agenttape proxy`` (recording) and through ``mitmdump`` (passing
through, recording nothing).

mitmproxy pins versions that clash with agenttape's development environment, so it lives in
a virtual environment of its own:

    python -m venv /tmp/mitm && /tmp/mitm/bin/pip install mitmproxy
    python -m bench.proxy_engines --mitmdump /tmp/mitm/bin/mitmdump
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import trustme

from tests.servers import Reply, Seen, Server

COUNT = 400


def app(seen: Seen) -> Reply:
    if seen.path == "/sse":
        return Reply(
            headers=[("Content-Type", "text/event-stream")],
            chunks=[b"data: first\n\n", b"data: second\n\n"],
            chunked=True,
            delay=0.2,
        )
    return Reply(
        headers=[("Content-Type", "application/json")],
        chunks=[b'{"ok": true, "pad": "' + b"x" * 200 + b'"}'],
    )


def per_request(client: httpx.Client, url: str) -> float:
    for _ in range(30):
        client.get(url)
    samples = []
    for _ in range(COUNT):
        start = time.perf_counter()
        client.get(url).read()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def first_chunk(client: httpx.Client, url: str) -> float:
    samples = []
    for _ in range(15):
        start = time.perf_counter()
        with client.stream("GET", url) as response:
            pieces = response.iter_raw()
            next(pieces)
            samples.append(time.perf_counter() - start)
            for _ in pieces:
                pass
    return statistics.median(samples) * 1000


@contextlib.contextmanager
def agenttape_proxy(work: Path, upstream_ca: Path) -> Iterator[tuple[str, Path]]:
    config = work / "agenttape-config"
    environment = {
        **os.environ,
        "AGENTTAPE_CONFIG_DIR": str(config),
        "SSL_CERT_FILE": str(upstream_ca),
    }
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "agenttape", "proxy", "--mode", "all"),
            "--cassette",
            str(work / "engines.msgpack"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=environment,
    )
    assert process.stdout is not None
    found = re.search(r"http://127\.0\.0\.1:\d+", process.stdout.readline())
    assert found is not None, "agenttape proxy did not start"
    try:
        yield found.group(0), config / "ca-cert.pem"
    finally:
        process.terminate()
        process.wait(timeout=60)


@contextlib.contextmanager
def mitmdump(binary: str, work: Path, upstream_ca: Path) -> Iterator[tuple[str, Path]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    confdir = work / "mitmproxy"
    process = subprocess.Popen(
        [
            *(binary, "--listen-host", "127.0.0.1", "-p", str(port), "-q"),
            *("--set", f"confdir={confdir}", "--set", "stream_large_bodies=1"),
            *("--set", f"ssl_verify_upstream_trusted_ca={upstream_ca}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not (confdir / "mitmproxy-ca-cert.pem").exists() or not _listening(port):
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("mitmdump did not start")
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}", confdir / "mitmproxy-ca-cert.pem"
    finally:
        process.terminate()
        process.wait(timeout=60)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mitmdump", help="a mitmdump binary; without it only agenttape runs")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, engines taken in turn")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agenttape-bench-engines-"))
    ca = trustme.CA()
    upstream_ca = work / "upstream-ca.pem"
    ca.cert_pem.write_to_path(str(upstream_ca))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    servers = {"HTTP": Server(app), "HTTPS": Server(app, tls=context)}
    direct_trust = ssl.create_default_context(cafile=str(upstream_ca))
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def measure(label: str, proxy: str | None, proxy_ca: Path | None) -> None:
        for name, server in servers.items():
            trust = direct_trust
            if proxy_ca is not None and name == "HTTPS":
                trust = ssl.create_default_context(cafile=str(proxy_ca))
            with httpx.Client(proxy=proxy, verify=trust) as client:
                get = per_request(client, server.url + "/x")
                first = first_chunk(client, server.url + "/sse")
            samples.setdefault((label, name), []).append((get, first))
            print(f"{label:>10} {name:<5} GET {get:.2f} ms, first chunk {first:.2f} ms")

    with contextlib.ExitStack() as stack:
        engines: list[tuple[str, str | None, Path | None]] = [("direct", None, None)]
        engines.append(("agenttape", *stack.enter_context(agenttape_proxy(work, upstream_ca))))
        if args.mitmdump:
            engines.append(
                ("mitmdump", *stack.enter_context(mitmdump(args.mitmdump, work, upstream_ca)))
            )
        # Rounds taken in turn, so a machine that is busier for a while weighs on every engine.
        for _round in range(args.rounds):
            for label, proxy, proxy_ca in engines:
                measure(label, proxy, proxy_ca)
    for server in servers.values():
        server.stop()
    print(f"\nmedians of {args.rounds} rounds; added = through the proxy minus direct")
    for (label, name), values in samples.items():
        get = statistics.median(v[0] for v in values)
        first = statistics.median(v[1] for v in values)
        direct = samples[("direct", name)]
        added_get = get - statistics.median(v[0] for v in direct)
        added_first = first - statistics.median(v[1] for v in direct)
        print(
            f"{label:>10} {name:<5} GET {get:.2f} ms (added {added_get:+.2f}), "
            f"first chunk {first:.2f} ms (added {added_first:+.2f})"
        )


if __name__ == "__main__":
    main()
