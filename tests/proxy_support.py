"""Running the recording proxy and real non-Python clients (curl, Node with the official
openai npm package) in tests.

The openai npm package is installed by the test session itself, once, into ``.cache/node``
at the repository root (kept between runs, so repeated runs take no time); tests that need
Node are skipped with a reason only where Node is not installed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import trustme

from tests.cli_support import AGENTTAPE
from tests.servers import App, Server

ROOT = Path(__file__).resolve().parent.parent
NODE_CACHE = Path(os.environ.get("AGENTTAPE_TEST_NODE_CACHE") or ROOT / ".cache" / "node")
OPENAI_NPM = "openai@^6"
NODE = shutil.which("node")
CURL = shutil.which("curl")

needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed on this machine")
needs_curl = pytest.mark.skipif(CURL is None, reason="curl is not installed on this machine")


def agenttape_ca() -> Path:
    """The CA the proxy signs with (the test run's own config directory)."""
    result = subprocess.run(
        [str(AGENTTAPE), "proxy", "--print-ca"], capture_output=True, text=True, check=True
    )
    return Path(result.stdout.strip())


BANNER_WAIT = 120.0
"""How long a proxy may take to print its banner before the test dumps its threads' stacks
(``faulthandler``, on SIGABRT) and fails with them: a start that hangs says where."""


class ProxyProcess:
    """``agenttape proxy`` running in a subprocess; ``stop`` ends it as Ctrl-C would."""

    def __init__(self, *args: str | Path, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [str(AGENTTAPE), "proxy", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})},
        )
        self.banner = self._read_banner()
        found = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", self.banner)
        if found is None:
            self.process.kill()
            raise AssertionError(f"no banner: {self.banner!r} {self.process.stderr.read()!r}")  # type: ignore[union-attr]
        self.url = found.group(1)
        self.port = int(found.group(2))
        self.stderr = ""
        self.returncode: int | None = None

    def _read_banner(self) -> str:
        """The banner's lines, read beside the wait so that a start that hangs fails with
        the proxy's stacks rather than holding the test run."""
        stdout = self.process.stdout
        assert stdout is not None
        lines: list[str] = []

        def read() -> None:
            for line in stdout:
                lines.append(line)
                if line.startswith("stop with") or "listening" not in "".join(lines):
                    break

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(BANNER_WAIT)
        if reader.is_alive():
            self.process.send_signal(signal.SIGABRT)
            _out, stacks = self.process.communicate(timeout=30)
            raise AssertionError(
                f"the proxy printed no banner in {BANNER_WAIT:.0f} s ({''.join(lines)!r}); "
                f"its threads when stopped:\n{stacks}"
            )
        return "".join(lines)

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; returns the exit status."""
        if self.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            _out, self.stderr = self.process.communicate(timeout=30)
            self.returncode = self.process.returncode
        return self.returncode


T = TypeVar("T")


def record_then_replay(
    start: Callable[..., ProxyProcess],
    cassette: Path,
    run: Callable[[ProxyProcess], T],
    servers: list[Server],
    env: dict[str, str] | None = None,
) -> tuple[T, T]:
    """``run`` through a recording proxy; the servers stopped; ``run`` again through a
    replaying one. Both proxies must exit cleanly (no miss)."""
    recording = start("--cassette", cassette, "--mode", "all", env=env)
    live = run(recording)
    assert recording.stop() == 0, recording.stderr
    assert "saved" in recording.stderr, recording.stderr
    for server in servers:
        server.stop()
    replaying = start("--cassette", cassette)
    replayed = run(replaying)
    assert replaying.stop() == 0, replaying.stderr
    return live, replayed


@pytest.fixture
def start_proxy() -> Iterator[Callable[..., ProxyProcess]]:
    started: list[ProxyProcess] = []

    def start(*args: str | Path, env: dict[str, str] | None = None) -> ProxyProcess:
        proxy = ProxyProcess(*args, env=env)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        with contextlib.suppress(Exception):
            proxy.stop()


@pytest.fixture(scope="module")
def upstream_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    """A test CA for the local TLS servers standing in for real APIs, and its PEM file (the
    proxy trusts it through SSL_CERT_FILE)."""
    ca = trustme.CA()
    path = tmp_path_factory.mktemp("upstream-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, path


@pytest.fixture
def serve_tls(upstream_ca: tuple[trustme.CA, Path]) -> Iterator[Callable[[App], Server]]:
    ca, _path = upstream_ca
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    servers: list[Server] = []

    def start(app: App) -> Server:
        server = Server(app, tls=context)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def curl(
    *args: str, proxy: str | None = None, ca: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """curl with the response head and raw body (``--raw`` keeps chunk framing) on stdout."""
    command = [CURL or "curl", "-sS", "-i", "--raw"]
    if proxy is not None:
        command += ["-x", proxy]
    if ca is not None:
        command += ["--cacert", str(ca)]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        timeout=30,
        env={**os.environ, **(env or {})},
        check=False,
    )


def npm_installed(prefix: Path, marker: str, *packages: str) -> Path:
    """``prefix/node_modules`` holding ``packages`` from the npm registry, installed once per
    machine (``marker``, a path under node_modules, says they are there); skips where Node or
    npm is missing."""
    npm = shutil.which("npm")
    if NODE is None or npm is None:
        pytest.skip("Node.js and npm are not installed on this machine")
    prefix.mkdir(parents=True, exist_ok=True)
    modules = prefix / "node_modules"
    import fcntl  # POSIX; the tests that use Node run there

    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers install them once between them
        if not (modules / marker).exists():
            command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund"]
            result = subprocess.run(
                [*command, "--no-save", *packages],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if result.returncode != 0:
                pytest.fail(f"npm could not install {packages}: {result.stderr[-2000:]}")
    return modules


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """``node_modules`` holding the official openai npm package, installed once per machine."""
    return npm_installed(NODE_CACHE, "openai/package.json", OPENAI_NPM)


def node_env(modules: Path) -> dict[str, str]:
    """Lets Node programs require the cached openai package."""
    existing = os.environ.get("NODE_PATH")
    return {"NODE_PATH": os.pathsep.join(filter(None, [str(modules), existing]))}


def python() -> str:
    return sys.executable
