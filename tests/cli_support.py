"""Running the ``agenttape`` command end to end, and a recorded agent session to run it on."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from llm_standin import StandIn

import agenttape
from agenttape._core import meta
from agenttape._core.models import Interaction, Request, Response
from agenttape._core.wire import codec
from tests.servers import Reply, Server, gzip_reply, refused_port

AGENTTAPE = Path(sys.executable).parent / "agenttape"
GZIP_DOCUMENT = {"order": "A-1", "items": [{"sku": "X", "qty": 2}]}


def run_captured(
    command: list[str], *, env: dict[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Runs a command to its end, its output kept as text; the status is the caller's to
    check."""
    return subprocess.run(
        command, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False
    )


def cli(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_captured(
        [str(AGENTTAPE), *map(str, args)], cwd=cwd, env={**os.environ, **(env or {})}
    )


ADDRESS_SPACE = 400 << 20
"""What ``run_bounded`` lets a command map: one that holds what a bomb stands for dies."""
BOUNDED_WAIT = 120.0
"""Seconds ``run_bounded`` waits for a command before it fails the test."""


@dataclass
class Bounded:
    """A command's exit status, output, peak resident memory (bytes) and wall time."""

    returncode: int
    stdout: str
    stderr: str
    peak: int
    seconds: float


# Starts the command from a small process: a child forked from the test process would count
# the test process's own pages in its peak (between fork and exec) and fail the bound.
_LAUNCHER = """
import os, resource, subprocess, sys
limit, report, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
process = subprocess.Popen(command)
_pid, status, usage = os.wait4(process.pid, 0)
with open(report, "w") as handle:
    handle.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_bounded(*args: str | Path) -> Bounded:
    """``agenttape ARGS`` with its address space capped, its own peak memory measured; a
    command still running after ``BOUNDED_WAIT`` seconds is killed (and fails the test)."""
    return bounded([str(AGENTTAPE), *map(str, args)])


def bounded(
    command: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    address_space: int = ADDRESS_SPACE,
) -> Bounded:
    """Any command run as ``run_bounded`` runs ``agenttape``: its address space capped at
    ``address_space``, its peak memory measured, killed after ``BOUNDED_WAIT`` seconds."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "peak"
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(address_space), str(report), *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,  # the command and its launcher, to stop both at once
        )
        try:
            out, err = process.communicate(timeout=BOUNDED_WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        seconds = time.monotonic() - started
        return Bounded(
            process.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            int(report.read_text()),
            seconds,
        )


def assert_one_line_error(result: subprocess.CompletedProcess[str] | Bounded, *words: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr


@dataclass
class World:
    """What the agent talks to: the LLM stand-in, a gzip tool server, and a port that is down."""

    standin: StandIn
    tool: Server
    down: int


def make_world(standin: StandIn, serve: Callable[..., Server]) -> World:
    tool = serve(lambda seen: gzip_reply(json.dumps(GZIP_DOCUMENT).encode()))
    return World(standin, tool, refused_port())


def record_session(path: Path, world: World, note: str) -> None:
    """A small agent run: OpenAI chat, Anthropic stream, a gzip tool call, a refused port."""
    import anthropic  # here, not at the top: every test run imports this module via conftest
    import openai

    base = world.standin.url
    with agenttape.use_cassette(path, mode="all"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the model's end-of-life notice
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test-key-1234567890abcdefgh")
        client.chat.completions.create(
            model="gpt-4o-mini",
            temperature=0.2,
            seed=7,
            messages=[{"role": "user", "content": f"where is my order {note}"}],
        )
        claude = anthropic.Anthropic(base_url=base, api_key="sk-ant-test-1234567890abcdefghijkl")
        with claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": f"hello {note}"}],
        ) as stream:
            stream.until_done()
        httpx.get(f"{world.tool.url}/orders/A-1")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{world.down}/down")


def recorded_session(tmp_path: Path, standin: StandIn, serve: Callable[..., Server]) -> Path:
    """A recorded session whose tool server is already stopped."""
    world = make_world(standin, serve)
    path = tmp_path / "session.msgpack"
    record_session(path, world, "A-1")
    world.tool.stop()
    return path


def record_three_endings(path: Path, standin: StandIn, serve: Callable[..., Server]) -> None:
    """Records one body of each way to end short: an OpenAI stream the SDK closes after
    ``[DONE]``, a stream its reader left early, a body a transport error cut."""
    import openai

    held = serve(lambda seen: Reply(chunks=[b"data: 1\n\n", b"data: 2\n\n"], chunked=True, delay=1))
    cut = serve(lambda seen: Reply(chunks=[b'{"half'], length=100))
    with agenttape.use_cassette(path, mode="once"):
        client = openai.OpenAI(base_url=f"{standin.url}/v1", api_key="sk-test-0123456789abcdef")
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert [chunk for chunk in stream]
        with httpx.stream("GET", held.url) as response:
            next(response.iter_raw())
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(cut.url)
    held.stop()
    cut.stop()


def write_run(
    store: Path,
    run_id: str,
    created: _dt.datetime,
    tags: dict[str, Any],
    status: str = "ok",
    dated: bool = True,
) -> Path:
    """A run file as the recorder lays it out, with a chosen creation time, one chat call
    (model gpt-4o-mini) and one tool call."""
    header = {
        **meta.new_header(tags, run_id=run_id),
        "created_at": created,
        "run": {
            "status": status,
            "reasons": [] if status == "ok" else [f"why {run_id}"],
            "interactions": 2,
            "duration": 1.25,
        },
    }
    chat = Request(
        "POST", "https://api.openai.com/v1/chat/completions", body=b'{"model":"gpt-4o-mini"}'
    )
    tool = Request("GET", f"https://orders.internal/{run_id}")
    interactions = [
        Interaction(request=chat, response=Response(200, body=b"{}")),
        Interaction(request=tool, response=Response(200, body=b"{}")),
    ]
    folder = store / f"{created:%Y-%m-%d}" if dated else store
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_id}.msgpack"
    path.write_bytes(codec.encode(header, interactions))
    return path


@contextlib.contextmanager
def signals_as_at_a_terminal() -> Iterator[None]:
    """Around starting a child a test signals: it starts as a command typed at a terminal
    does, SIGINT and SIGTERM at their defaults and unblocked, whatever the test's process
    inherited or was left with by a library an earlier test used. Set in this process while
    the child starts, not in the child (a ``preexec_fn`` runs Python between fork and exec,
    with the fork handlers of every library loaded, and grpc's abort the child): a signal
    ignored here would stay ignored across exec, so it is caught meanwhile (a caught signal
    is at its default after exec), and the mask a child starts with is its parent's."""
    wanted = {signal.SIGINT, signal.SIGTERM}
    ignored = [number for number in wanted if signal.getsignal(number) == signal.SIG_IGN]
    for number in ignored:
        signal.signal(number, lambda *_: None)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, wanted)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for number in ignored:
            signal.signal(number, signal.SIG_IGN)


def fresh_copies(template: Path, folder: Path, scheme: str = "") -> Callable[[int], str]:
    """A fresh copy of the store at ``template`` for each kill point (the store's URL, with
    ``scheme`` before the path), so every kill starts from the same state."""

    def fresh(after: int) -> str:
        target = folder / f"kill{after}"
        shutil.copytree(template, target)
        return f"{scheme}{target}"

    return fresh
