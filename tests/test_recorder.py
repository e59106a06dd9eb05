from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

import agenttape
from agenttape._core.wire import codec
from agenttape._production.stored_runs import list_runs
from tests.servers import (
    Reply,
    Server,
    echo_path,
    gzip_reply,
    json_reply,
    refused_port,
    sse_reply,
)

ROOT = Path(__file__).resolve().parent.parent


def stored(store: Path, run: agenttape.Run) -> agenttape.Cassette:
    return agenttape.load(store / run.path)


def paths(cassette: agenttape.Cassette) -> list[str]:
    return [httpx.URL(i.request.url).path for i in cassette.interactions]


# -- what a kept run holds -------------------------------------------------------------


def test_kept_run_is_a_byte_exact_cassette_with_tags_and_replay_kit(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    reply = gzip_reply(b'{"order": "o_1", "status": "shipped"}')
    reply.headers += [("X-Trace", "a"), ("x-trace", "b")]
    server = serve(lambda seen: reply)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    with httpx.Client() as client:
        bare = client.get(server.url + "/orders/o_1")
        with recorder.run(user_id="u_7710", tenant_id="t_3", flags={"beta": True}) as run:
            seen = client.get(server.url + "/orders/o_1")
    assert recorder.flush(timeout=10)

    assert (seen.status_code, seen.headers.raw, seen.content) == (
        bare.status_code,
        bare.headers.raw,
        bare.content,
    )
    assert run.kept is True and run.status == "ok"
    assert (store / run.path).is_file()
    assert run.path.name == f"{run.run_id}.msgpack"
    cassette = stored(store, run)
    [interaction] = cassette.interactions
    assert interaction.response is not None
    assert interaction.response.body == reply.chunks[0]  # still gzip: undecoded
    assert [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in interaction.response.headers
    ] == (seen.headers.raw)
    header = cassette.metadata
    assert header["run_id"] == run.run_id
    assert header["tags"] == {"user_id": "u_7710", "tenant_id": "t_3", "flags": {"beta": True}}
    assert header["libraries"]["httpx"] == httpx.__version__
    assert header["agenttape_version"] == agenttape.__version__
    assert {"python", "platform", "created_at", "git"} <= set(header)
    assert header["run"]["status"] == "ok" and header["run"]["interactions"] == 1


def test_a_stream_reaches_the_caller_live_while_it_is_recorded(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    gate = threading.Event()
    reply = sse_reply([b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"])
    reply.gate = gate
    server = serve(lambda seen: reply)
    recorder = recorders(tmp_path / "runs", keep="all")
    received = []
    with recorder.run() as run, httpx.stream("GET", server.url + "/events") as response:
        for chunk in response.iter_raw():
            received.append(chunk)
            # The server holds the rest until now: a buffering recorder would never get here.
            gate.set()
    recorder.flush(timeout=10)
    assert b"".join(received) == b"data: one\n\ndata: two\n\ndata: three\n\n"
    [interaction] = stored(tmp_path / "runs", run).interactions
    assert interaction.response is not None
    assert interaction.response.body == b"".join(received)
    assert not interaction.response.truncated


# -- what is kept ----------------------------------------------------------------------


def test_keep_errors_keeps_only_runs_that_raised_failed_or_were_flagged(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store)  # keep="errors" is the default
    with recorder.run(case="ok") as healthy:
        assert httpx.get(server.url + "/fine").status_code == 200
    boom = ValueError("wrong total")
    with pytest.raises(ValueError) as raised, recorder.run(case="raised") as crashed:
        httpx.get(server.url + "/fine")
        raise boom
    with recorder.run(case="http") as failed:
        assert httpx.get(server.url + "/status/503?key=s3cret").status_code == 503
    with recorder.run(case="flagged") as flagged:
        httpx.get(server.url + "/fine")
        flagged.flag("wrong order shown")
    with recorder.run(case="transport") as unreachable, pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{refused_port()}/down")
    assert recorder.flush(timeout=10)

    assert raised.value is boom  # the agent's exception passes through untouched
    assert healthy.kept is False and healthy.status == "ok"
    assert [crashed.status, failed.status, flagged.status, unreachable.status] == [
        "raised",
        "failed",
        "flagged",
        "failed",
    ]
    listed = {info.tags["case"]: info for info in list_runs(store)}
    assert sorted(listed) == ["flagged", "http", "raised", "transport"]
    assert listed["raised"].reasons == ["raised ValueError: wrong total"]
    assert listed["http"].reasons == [f"HTTP 503 from GET {server.url}/status/503"]
    assert listed["flagged"].reasons == ["flagged: wrong order shown"]
    assert listed["transport"].reasons[0].startswith("ConnectError on GET http://127.0.0.1:")
    assert recorder.stats.runs == 5 and recorder.stats.kept == 4 and recorder.stats.written == 4


async def test_a_cancelled_async_run_is_kept_as_raised(
    recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    recorder = recorders(tmp_path / "runs")
    started = asyncio.Event()

    async def handler() -> None:
        async with recorder.run(case="cancelled"):
            started.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(handler())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.to_thread(recorder.flush, 10)
    [info] = await asyncio.to_thread(list_runs, tmp_path / "runs")
    assert (info.status, info.reasons) == ("raised", ["raised CancelledError"])


def test_boundary_calls_belong_to_the_run_and_replay_from_it(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    calls: list[str] = []

    @agenttape.boundary("lookup_order")
    def lookup_order(order_id: str) -> dict[str, str]:
        calls.append(order_id)
        if order_id == "o_missing":
            raise LookupError(f"no order {order_id}")
        return {"order_id": order_id, "status": "shipped"}

    def agent() -> tuple[dict[str, str], str, Any]:
        found = lookup_order("o_1")
        try:
            lookup_order("o_missing")
        except LookupError as exc:
            missing = str(exc)
        return found, missing, httpx.get(server.url + "/after").json()

    store = tmp_path / "runs"
    recorder = recorders(store)
    with recorder.run(user_id="u_1") as run:
        live = agent()
    recorder.flush(timeout=10)
    assert (run.status, run.kept) == ("failed", True)
    [info] = list_runs(store)
    assert info.reasons == ["tool:lookup_order raised LookupError"]
    cassette = stored(store, run)
    assert [i.boundary for i in cassette.interactions] == ["tool:lookup_order"] * 2 + ["http"]

    server.stop()
    with agenttape.use_cassette(store / run.path, mode="none"):
        assert agent() == live
    assert calls == ["o_1", "o_missing"]  # the tool's body did not run again


@pytest.mark.parametrize(("rate", "kept_ok"), [(0.0, 0), (1.0, 3)])
def test_sampled_keeps_every_failed_run_and_a_share_of_the_healthy_ones(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    tmp_path: Path,
    rate: float,
    kept_ok: int,
) -> None:
    server = serve(echo_path)
    recorder = recorders(tmp_path / "runs", keep="sampled", sample_rate=rate)
    for _ in range(3):
        with recorder.run():
            httpx.get(server.url + "/fine")
    with recorder.run():
        httpx.get(server.url + "/status/500")
    recorder.flush(timeout=10)
    statuses = sorted(info.status for info in list_runs(tmp_path / "runs"))
    assert statuses == ["failed"] + ["ok"] * kept_ok


# -- concurrent runs never mix -----------------------------------------------------------


def test_runs_in_parallel_threads_each_get_exactly_their_own_exchanges(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    workers = 8
    barrier = threading.Barrier(workers)
    runs: dict[int, agenttape.Run] = {}

    def handle(worker: int) -> None:
        with httpx.Client() as client, recorder.run(worker=worker) as run:
            runs[worker] = run
            barrier.wait()
            for step in range(5):
                client.get(f"{server.url}/w{worker}/{step}")

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(handle, range(workers)))
    recorder.flush(timeout=10)
    for worker, run in runs.items():
        assert paths(stored(store, run)) == [f"/w{worker}/{step}" for step in range(5)]


async def test_runs_in_parallel_asyncio_tasks_each_get_exactly_their_own_exchanges(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")

    async def handle(client: httpx.AsyncClient, task: int) -> agenttape.Run:
        async with recorder.run(task=task) as run:
            for step in range(4):
                await client.get(f"{server.url}/t{task}/{step}")
                await asyncio.sleep(0)
            # Tasks this run starts inherit it.
            await asyncio.gather(*(client.get(f"{server.url}/t{task}/child{n}") for n in range(2)))
        return run

    async with httpx.AsyncClient() as client:
        runs = await asyncio.gather(*(handle(client, task) for task in range(20)))
    await asyncio.to_thread(recorder.flush, 10)
    for task, run in enumerate(runs):
        recorded = paths(await asyncio.to_thread(stored, store, run))
        assert recorded[:4] == [f"/t{task}/{step}" for step in range(4)]
        assert sorted(recorded[4:]) == [f"/t{task}/child0", f"/t{task}/child1"]


def test_worker_threads_join_a_run_through_bind_or_a_copied_context(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")

    def fetch(path: str) -> int:
        return httpx.get(server.url + path).status_code

    with ThreadPoolExecutor(4) as pool:
        with recorder.run() as first, recorder.run() as second:
            # Bound workers of the inner run, several at once.
            assert (
                list(pool.map(second.bind(fetch), ["/bound/1", "/bound/2", "/bound/3"]))
                == [200] * 3
            )
            context = contextvars.copy_context()
            assert pool.submit(context.run, fetch, "/copied").result() == 200
        with recorder.run() as third:
            fetch("/third")
    recorder.flush(timeout=10)
    assert paths(stored(store, first)) == []
    assert sorted(paths(stored(store, second))) == ["/bound/1", "/bound/2", "/bound/3", "/copied"]
    assert paths(stored(store, third)) == ["/third"]


async def test_to_thread_inside_an_async_run_is_covered(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    recorder = recorders(tmp_path / "runs", keep="all")
    async with recorder.run() as run:
        await asyncio.to_thread(httpx.get, server.url + "/in-thread")
    await asyncio.to_thread(recorder.flush, 10)
    assert paths(await asyncio.to_thread(stored, tmp_path / "runs", run)) == ["/in-thread"]


def test_a_run_inside_a_replaying_cassette_leaves_the_cassette_in_charge(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    tape = tmp_path / "tape.msgpack"
    with agenttape.use_cassette(tape, mode="all"):
        httpx.get(server.url + "/replayed")
    server.stop()
    recorder = recorders(tmp_path / "runs", keep="all")
    with agenttape.use_cassette(tape, mode="none"), recorder.run() as run:
        assert httpx.get(server.url + "/replayed").json() == {"path": "/replayed"}
    recorder.flush(timeout=10)
    assert run.kept is False
    assert recorder.stats.runs == 0
    assert not (tmp_path / "runs").exists()


# -- the store never slows or fails the agent --------------------------------------------


@pytest.fixture
def stall_gate() -> threading.Event:
    """Registers two fsspec stores: ``stallingtest://``, whose writes hang until the returned
    gate opens, and ``failingtest://``, whose writes are refused."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    gate = threading.Event()

    class StallingFileSystem(MemoryFileSystem):
        protocol = "stallingtest"
        store: ClassVar[dict[str, Any]] = {}  # its own files, apart from memory://
        pseudo_dirs: ClassVar[list[str]] = [""]

        def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
            gate.wait()
            super().pipe_file(path, value, *args, **kwargs)

    class FailingFileSystem(MemoryFileSystem):
        protocol = "failingtest"
        store: ClassVar[dict[str, Any]] = {}
        pseudo_dirs: ClassVar[list[str]] = [""]

        def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
            raise PermissionError("bucket policy denies PutObject")

    fsspec.register_implementation("stallingtest", StallingFileSystem, clobber=True)
    fsspec.register_implementation("failingtest", FailingFileSystem, clobber=True)
    return gate


def test_a_stalled_store_never_blocks_runs_and_the_queue_stays_within_its_limit(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    stall_gate: threading.Event,
) -> None:
    body = b"x" * 20_000
    server = serve(lambda seen: Reply(chunks=[body]))
    limit = 100_000
    recorder = recorders("stallingtest://runs", keep="all", max_queue_bytes=limit)
    runs = []
    try:
        for _ in range(20):
            with recorder.run() as run:
                assert httpx.get(server.url + "/big").content == body
            runs.append(run)
            assert recorder.stats.queued_bytes <= limit
        stats = recorder.stats
        assert stats.kept == 20 and stats.written == 0
        assert stats.dropped > 0 and stats.dropped == sum(1 for run in runs if not run.kept)
        assert recorder.flush(timeout=0.05) is False
    finally:
        stall_gate.set()
    assert recorder.flush(timeout=10)
    stats = recorder.stats
    assert stats.written == stats.kept - stats.dropped and stats.queued_bytes == 0
    written = {info.run_id for info in list_runs("stallingtest://runs")}
    assert written == {run.run_id for run in runs if run.kept}


def test_a_run_bigger_than_the_queue_is_written_when_nothing_waits(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    body = b"q" * 50_000
    server = serve(lambda seen: Reply(chunks=[body]))
    recorder = recorders(tmp_path / "runs", keep="all", max_queue_bytes=10_000)
    with recorder.run() as run:
        httpx.get(server.url + "/big")
    assert recorder.flush(timeout=10) and run.kept
    assert recorder.stats.written == 1 and recorder.stats.lost == 0


@pytest.mark.usefixtures("stall_gate")
def test_a_failing_store_loses_the_run_logs_it_and_counts_it(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = serve(echo_path)
    recorder = recorders("failingtest://runs", keep="all")
    caplog.set_level(logging.WARNING, logger="agenttape.recorder")
    ids = []
    for _ in range(3):
        with recorder.run() as run:
            assert httpx.get(server.url + "/fine").status_code == 200
        ids.append(run.run_id)
    assert recorder.flush(timeout=10)
    assert recorder.stats.failed == 3 and recorder.stats.lost == 3 and recorder.stats.written == 0
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1  # further losses within the interval are counted, not logged
    assert ids[0] in messages[0] and "bucket policy denies PutObject" in messages[0]


def test_a_local_store_that_cannot_be_written_loses_the_run_quietly(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    recorder = recorders(blocker, keep="all")
    with recorder.run():
        assert httpx.get(server.url + "/fine").status_code == 200
    assert recorder.flush(timeout=10)
    assert recorder.stats.failed == 1


# -- lifecycle -------------------------------------------------------------------------------


def test_with_recorder_flushes_on_exit_and_a_closed_recorder_keeps_nothing(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    with agenttape.Recorder(store, keep="all") as recorder, recorder.run() as run:
        httpx.get(server.url + "/fine")
    assert recorder.closed and (store / run.path).is_file()
    with recorder.run() as late:
        assert httpx.get(server.url + "/late").status_code == 200
    assert late.kept is False and recorder.stats.dropped == 1
    assert recorder.close() is True


def test_runs_finished_before_interpreter_exit_are_written(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    script = textwrap.dedent(
        f"""
        import httpx, agenttape
        recorder = agenttape.Recorder({str(store)!r}, keep="all")
        for n in range(5):
            with recorder.run(n=n):
                httpx.get({server.url!r} + "/exit/" + str(n))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=60)
    assert sorted(info.tags["n"] for info in list_runs(store)) == [0, 1, 2, 3, 4]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_worker_gets_its_own_writer(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    with recorder.run(side="parent"):
        httpx.get(server.url + "/parent")
    assert recorder.flush(timeout=10)  # the parent's writer thread exists now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 2
        try:
            with recorder.run(side="child"):
                httpx.get(server.url + "/child")
            code = 0 if recorder.flush(timeout=10) and recorder.stats.written == 1 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sorted(info.tags["side"] for info in list_runs(store)) == ["child", "parent"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_run_ids_stay_unique_across_user_seeding_and_forks(
    recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    recorder = recorders(tmp_path / "runs")
    random.seed(7)
    first = recorder.run().run_id
    random.seed(7)
    second = recorder.run().run_id
    assert first != second  # the process-wide random module does not name runs
    assert re.fullmatch("[0-9a-f]{32}", first)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.write(write, recorder.run().run_id.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    # Without a fresh seed in the child, both would draw the same next id.
    assert re.fullmatch("[0-9a-f]{32}", child) and child != recorder.run().run_id
    assert len({recorder.run().run_id for _ in range(1000)}) == 1000


def test_a_run_over_its_byte_budget_keeps_the_exchanges_that_fit(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    body = b"y" * 10_000
    server = serve(
        lambda seen: (
            Reply(chunks=[body] * 10, chunked=True)
            if seen.path == "/huge"
            else Reply(chunks=[body])
        )
    )
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all", max_bytes_per_run=25_000)
    with recorder.run() as run:
        got = [httpx.get(f"{server.url}/{n}").content for n in range(3)]
        huge = httpx.get(server.url + "/huge").content
    recorder.flush(timeout=10)
    assert got == [body] * 3 and huge == body * 10  # the caller got everything
    cassette = stored(store, run)
    assert paths(cassette) == ["/0", "/1"]
    assert cassette.metadata["run"]["dropped"] == 2


def test_secrets_are_redacted_before_a_run_reaches_the_store(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    key = "sk-proj-" + "R3alSecretKeyValue0123456789"
    server = serve(
        lambda seen: json_reply(
            {"ok": True},
            status=401,
            headers=[("Set-Cookie", "session=c00kie"), ("X-Session", "sess-0042")],
        )
    )
    store = tmp_path / "runs"
    recorder = recorders(store, keep="errors", redact=["json:user.email", "header:x-session"])
    with recorder.run() as run:
        httpx.post(
            server.url + "/v1/chat?api_key=q-secret",
            headers={"Authorization": f"Bearer {key}"},
            json={"user": {"email": "ann@example.com"}, "note": f"my key is {key}"},
        )
    recorder.flush(timeout=10)
    assert server.seen[0].header("authorization") == f"Bearer {key}"  # passthrough
    data = (store / run.path).read_bytes()
    for secret in (key.encode(), b"q-secret", b"c00kie", b"sess-0042", b"ann@example.com"):
        assert secret not in data
    [interaction] = stored(store, run).interactions
    assert interaction.request.header("authorization") == "<redacted>"


def test_secrets_in_tags_and_flag_reasons_never_reach_the_run_header(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    key = "sk-proj-" + "TagSecretKeyValue0123456789"
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1Xzc3MTAifQ.c2lnbmF0dXJlLXZhbHVl"
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="errors")
    tags = {"user_id": "u_7710", "session": f"Bearer {jwt}", "auth": {"clientSecret": "cs-42x"}}
    with recorder.run(**tags) as run:
        httpx.get(server.url + "/orders")
        run.flag(f"retried with key {key} after password=hunter2-x")
    assert recorder.flush(timeout=10)
    assert run.tags == tags  # the caller's own tags are left as given
    data = (store / run.path).read_bytes()
    for secret in (key, jwt.split(".")[1], "cs-42x", "hunter2-x"):
        assert secret.encode() not in data
    header = stored(store, run).metadata
    assert header["tags"] == {
        "user_id": "u_7710",
        "session": "<redacted>",
        "auth": {"clientSecret": "<redacted>"},
    }
    assert header["run"]["flags"] == ["retried with key <redacted> after password=<redacted>"]
    assert header["run"]["reasons"] == [
        "flagged: retried with key <redacted> after password=<redacted>"
    ]


def test_secrets_in_cassette_tags_never_reach_the_header(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(echo_path)
    path = tmp_path / "tagged.msgpack"
    with agenttape.use_cassette(path, mode="all", tags={"api_key": "k-123", "note": "ok"}):
        httpx.get(server.url + "/orders")
    assert b"k-123" not in path.read_bytes()
    assert agenttape.load(path).metadata["tags"] == {"api_key": "<redacted>", "note": "ok"}


def test_a_run_that_cannot_start_recording_leaves_the_agent_alone(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agenttape import _adapters

    server = serve(echo_path)
    recorder = recorders(tmp_path / "runs", keep="all")

    # Installing the adapters fails outright (an adapter that merely cannot patch its library
    # stays off with a warning instead, see tests/test_adapters_install.py).
    def broken(library: str, module: object) -> None:
        raise RuntimeError("the import machinery is broken")

    monkeypatch.setitem(
        _adapters.LIBRARIES,
        "json",
        _adapters.Library("agenttape._adapters.missing_adapter", "Python", "nothing"),
    )
    monkeypatch.setattr(_adapters, "_installed", set(_adapters._installed))
    monkeypatch.setattr(_adapters, "_install", broken)
    with recorder.run() as run:
        assert httpx.get(server.url + "/still-served").status_code == 200
    assert run.kept is False and recorder.stats.runs == 0
    assert "could not start recording" in caplog.text


def test_bad_options_and_misuse_get_clear_errors(
    recorders: Callable[..., agenttape.Recorder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="keep must be one of"):
        agenttape.Recorder(tmp_path, keep="some")
    with pytest.raises(ValueError, match="sample_rate"):
        agenttape.Recorder(tmp_path, keep="sampled", sample_rate=2)
    with pytest.raises(ValueError, match="redact rule"):
        agenttape.Recorder(tmp_path, redact=["nonsense"])
    recorder = recorders(tmp_path)
    with pytest.raises(ValueError, match="run_id"):
        recorder.run(run_id="../../etc/passwd")
    with pytest.raises(TypeError, match="msgpack-serialisable"):
        recorder.run(user=object())
    run = recorder.run(run_id="r_1")
    with run:
        pass
    with pytest.raises(agenttape.AgentTapeError, match="already entered"), run:
        pass
    with pytest.raises(TypeError, match="does not decorate"):
        run(lambda: None)
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(agenttape.AgentTapeError, match=r"agenttape-recorder\[store\]"):
        agenttape.Recorder("s3://bucket/runs")


def test_memory_store_runs_can_be_listed_and_decoded(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder]
) -> None:
    fsspec = pytest.importorskip("fsspec")
    server = serve(echo_path)
    recorder = recorders("memory://recorder-test/prod", keep="all")
    with recorder.run(tenant_id="t_3") as run:
        httpx.get(server.url + "/mem")
    recorder.flush(timeout=10)
    [info] = list_runs("memory://recorder-test/prod", tags={"tenant_id": "t_3"})
    assert info.run_id == run.run_id and info.name == run.path.as_posix()
    data = fsspec.filesystem("memory").cat_file(f"/recorder-test/prod/{info.name}")
    header, interactions = codec.decode(data, info.name)
    assert header["tags"] == {"tenant_id": "t_3"} and len(interactions) == 1
