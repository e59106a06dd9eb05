from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agenttape
from agenttape._adapters import install_adapters
from tests.servers import App, S3StandIn, Server, WebSocketServer, refused_port

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

from llm_standin import StandIn  # noqa: E402

from tests.cli_support import recorded_session  # noqa: E402
from tests.proxy_support import node_modules, serve_tls, start_proxy, upstream_ca  # noqa: E402, F401

# httpx and httpx2 import their transport library when they make their first transport,
# reading its package metadata: imported here, before any test's loop runs.
for _lazy in ("httpcore", "httpcore2"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_lazy)

# The recording proxy's CA goes to a directory of the test run's own, never the user's.
if not os.environ.get("AGENTTAPE_CONFIG_DIR"):
    _config = tempfile.mkdtemp(prefix="agenttape-test-config-")
    os.environ["AGENTTAPE_CONFIG_DIR"] = _config
    atexit.register(shutil.rmtree, _config, True)

# So does what agenttape caches between runs (the run index's footers).
if not os.environ.get("AGENTTAPE_CACHE_DIR"):
    _cache = tempfile.mkdtemp(prefix="agenttape-test-cache-")
    os.environ["AGENTTAPE_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)


@pytest.fixture(autouse=True)
def no_blocking_call_in_the_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """An async test runs under blockbuster, as users' async suites do: a blocking call made
    inside the running event loop (a file read, ``time.sleep``, a socket waited on) raises
    ``BlockingError``. The test servers run in threads of their own; starting and stopping
    one (waiting for its thread) is the test's own doing, as are sync fixtures, run before
    the loop."""
    if not inspect.iscoroutinefunction(getattr(request, "function", None)):
        yield
        return
    from blockbuster import blockbuster_ctx

    # blockbuster puts back, when it stops, the socket and time functions it found when it
    # started: agenttape's patches of them (the network guard) are made first, so they stay
    # (one installed during the test would be undone then, and installed again by the next
    # cassette: ledger.reinstate).
    install_adapters()
    with blockbuster_ctx() as blockbuster:
        for function in blockbuster.functions.values():
            function.can_block_in("tests/servers.py", {"__init__", "stop", "__exit__"})
            function.can_block_in("examples/standin_server.py", {"__init__", "stop", "__exit__"})
            # httpx before 0.28 looks at the files SSL_CERT_FILE and ~/.netrc name on each
            # client and request, with or without agenttape: the library's own.
            function.can_block_in("httpx/_utils.py", {"get_ca_bundle_from_env", "netrc_info"})
            function.can_block_in("httpx/_config.py", {"load_ssl_context_verify"})
            # openai 1.x asks platform.architecture() (which reads the interpreter's file) for
            # its first request's headers: the SDK's own.
            function.can_block_in("openai/_base_client.py", {"get_architecture"})
            # niquests' AsyncSession looks for ~/.netrc on each request: the library's own.
            function.can_block_in("niquests/utils.py", {"get_netrc_auth"})
        yield


@pytest.fixture
def serve() -> Iterator[Callable[[App], Server]]:
    """Start real servers on 127.0.0.1; each is stopped at the end of the test."""
    servers: list[Server] = []

    def start(app: App) -> Server:
        server = Server(app)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with StandIn() as api:
        yield api


@pytest.fixture
def ws_server() -> Iterator[WebSocketServer]:
    """A real WebSocket server on 127.0.0.1 (``tests.servers.WebSocketServer``)."""
    with WebSocketServer() as running:
        yield running


@pytest.fixture
def cassette_path(tmp_path: Path) -> Path:
    return tmp_path / "cassettes" / "tape.msgpack"


@pytest.fixture
def session(tmp_path: Path, standin: StandIn, serve: Callable[..., Server]) -> Path:
    """A recorded session (LLM stand-in plus a tool server, the server already stopped)."""
    return recorded_session(tmp_path, standin, serve)


@pytest.fixture
def recorders() -> Iterator[Callable[..., agenttape.Recorder]]:
    """Recorders made by a test, closed at its end."""
    made: list[agenttape.Recorder] = []

    def make(store: Any, **options: Any) -> agenttape.Recorder:
        recorder = agenttape.Recorder(store, **options)
        made.append(recorder)
        return recorder

    yield make
    for recorder in made:
        recorder.close(timeout=10)


@pytest.fixture
def s3() -> Iterator[dict[str, Any]]:
    """A real S3-compatible server (moto's) on 127.0.0.1 with one bucket, and the storage
    options that reach it (an ``s3://`` store opens through obstore with these)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("obstore")
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    port = refused_port()
    with S3StandIn(port):
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket="agent-runs")
        yield {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }


@pytest.fixture(params=["default", "eager"])
async def task_factory(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """Tasks as the loop starts them by default, or eagerly: from Python 3.12 a task may
    run its first steps at once, inside ``create_task`` (``eager_task_factory``)."""
    loop = asyncio.get_running_loop()
    if request.param == "eager":
        eager = getattr(asyncio, "eager_task_factory", None)
        if eager is None:
            pytest.skip("asyncio has no eager task factory before Python 3.12")
        loop.set_task_factory(eager)
    yield request.param
    loop.set_task_factory(None)
