"""Runs follow their work into pool tasks and threads, without ``run.bind``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

import agenttape
from tests.servers import Server, echo_path


def _paths(store: Path, run: agenttape.Run) -> list[str]:
    return sorted(
        httpx.URL(i.request.url).path for i in agenttape.load(store / run.path).interactions
    )


def test_submit_map_and_threads_started_in_a_run_carry_it(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")

    def fetch(path: str) -> int:
        return httpx.get(server.url + path).status_code

    with ThreadPoolExecutor(2) as pool, recorder.run() as run:
        assert pool.submit(fetch, "/submit").result() == 200
        assert list(pool.map(fetch, ["/map/1", "/map/2"])) == [200, 200]
        thread = threading.Thread(target=fetch, args=("/thread",))
        thread.start()
        thread.join()
        timer = threading.Timer(0, fetch, args=("/timer",))
        timer.start()
        timer.join()
    recorder.flush(timeout=10)
    assert _paths(store, run) == ["/map/1", "/map/2", "/submit", "/thread", "/timer"]


async def test_run_in_executor_inside_an_async_run_carries_it(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    loop = asyncio.get_running_loop()
    async with recorder.run() as run:
        await loop.run_in_executor(None, httpx.get, server.url + "/default")
        pool = ThreadPoolExecutor(1)
        try:
            await loop.run_in_executor(pool, httpx.get, server.url + "/own-pool")
        finally:
            await asyncio.to_thread(pool.shutdown)  # it waits for its thread: off the loop
    await asyncio.to_thread(recorder.flush, 10)
    assert (await asyncio.to_thread(_paths, store, run)) == ["/default", "/own-pool"]


def test_concurrent_runs_fanning_out_to_one_pool_get_exactly_their_own(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    shared = ThreadPoolExecutor(4)
    barrier = threading.Barrier(2)
    runs: dict[str, agenttape.Run] = {}

    def handle(name: str) -> None:
        with recorder.run(name=name) as run:
            runs[name] = run
            barrier.wait()
            futures = [shared.submit(httpx.get, f"{server.url}/{name}/{n}") for n in range(6)]
            for future in futures:
                future.result()

    with ThreadPoolExecutor(2) as handlers:
        list(handlers.map(handle, ["a", "b"]))
    shared.shutdown()
    recorder.flush(timeout=10)
    assert _paths(store, runs["a"]) == [f"/a/{n}" for n in range(6)]
    assert _paths(store, runs["b"]) == [f"/b/{n}" for n in range(6)]


def test_a_pool_worker_started_in_a_run_does_not_keep_it(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    """The run goes with the task, not with the worker thread the task made the pool start:
    work submitted later from outside the run, to the same worker, is not recorded in it."""
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    pool = ThreadPoolExecutor(1)
    go, done = threading.Event(), threading.Event()

    def outsider() -> None:  # started before the run: it belongs to none
        go.wait(10)
        pool.submit(httpx.get, server.url + "/outside").result()
        done.set()

    threading.Thread(target=outsider).start()
    with recorder.run() as run:
        pool.submit(httpx.get, server.url + "/inside").result()  # starts the pool's worker
        go.set()
        assert done.wait(10)
    pool.shutdown()
    recorder.flush(timeout=10)
    assert _paths(store, run) == ["/inside"]
    assert [seen.path for seen in server.seen] == ["/inside", "/outside"]


ONLY_WHILE_OPEN = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
import agenttape
from agenttape._adapters import ledger

def patched():
    places = ((ThreadPoolExecutor, "submit"), (threading.Thread, "start"))
    return [ledger.installed(target, name) is not None for target, name in places]

states = [patched()]
first, second = agenttape.Recorder(sys.argv[1] + "/a"), agenttape.Recorder(sys.argv[1] + "/b")
states.append(patched())
first.close(timeout=10)
states.append(patched())
second.close(timeout=10)
states.append(patched())
print(states)
"""


def test_only_an_open_recorder_patches_the_pool_and_threads(tmp_path: Path) -> None:
    """In a process of its own, so that no other test's recorder is open."""
    result = subprocess.run(
        [sys.executable, "-c", ONLY_WHILE_OPEN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    closed, opened = "[False, False]", "[True, True]"
    assert result.stdout.strip() == f"[{closed}, {opened}, {opened}, {closed}]"
