"""Many threads and tasks share one cassette: each interaction recorded once, each served once."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import agenttape
from tests.servers import Reply, Seen, Server, path_body

THREADS = 32
PER_THREAD = 4
TASKS = 200


def counting_app() -> Callable[[Seen], Reply]:
    """``/shared`` answers with a serial number (identical requests, different responses);
    every other path with its own body."""
    serial = itertools.count()
    lock = threading.Lock()

    def app(seen: Seen) -> Reply:
        if seen.path == "/shared":
            with lock:
                body = f"serial {next(serial)}".encode()
        else:
            body = path_body(seen.path, 64)
        return Reply(chunks=[body])

    return app


def shared_client() -> httpx.Client:
    """One client for every thread, keeping as many connections alive as there are threads.
    With fewer, httpcore (1.0) closes a connection it counts as idle while another thread's
    request has just been handed it, and that request fails with EBADF: its race, not ours
    (``_assign_requests_to_connections`` counts every connection as idle)."""
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=THREADS))


def run_threads(work: Callable[[int], None]) -> dict[int, BaseException]:
    """Runs ``work(n)`` in THREADS threads released together; their exceptions by number."""
    errors: dict[int, BaseException] = {}
    barrier = threading.Barrier(THREADS)

    def target(number: int) -> None:
        barrier.wait()
        try:
            work(number)
        except BaseException as exc:
            errors[number] = exc

    threads = [threading.Thread(target=target, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_threads_record_each_interaction_once_and_replay_each_its_own(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(counting_app())
    client = shared_client()

    def record(number: int) -> None:
        for index in range(PER_THREAD):
            response = client.get(f"{server.url}/t/{number}/{index}")
            assert response.content == path_body(f"/t/{number}/{index}", 64)
        client.get(f"{server.url}/shared")

    with agenttape.use_cassette(cassette_path, mode="all"):
        assert run_threads(record) == {}
    client.close()

    recorded = agenttape.load(cassette_path).interactions
    expected = {f"{server.url}/t/{n}/{i}" for n in range(THREADS) for i in range(PER_THREAD)}
    counts = Counter(i.request.url for i in recorded)
    assert counts == Counter({**dict.fromkeys(expected, 1), f"{server.url}/shared": THREADS})
    shared = sorted(
        i.response.body for i in recorded if i.request.url.endswith("/shared") and i.response
    )
    assert shared == sorted(f"serial {n}".encode() for n in range(THREADS))
    server.stop()

    served: dict[int, list[bytes]] = {}
    replay_client = shared_client()

    def replay(number: int) -> None:
        bodies = [
            replay_client.get(f"{server.url}/t/{number}/{index}").content
            for index in range(PER_THREAD)
        ]
        assert bodies == [path_body(f"/t/{number}/{i}", 64) for i in range(PER_THREAD)]
        served[number] = [replay_client.get(f"{server.url}/shared").content]

    with agenttape.use_cassette(cassette_path, mode="none") as tape:
        assert run_threads(replay) == {}
        assert tape.all_played
    replay_client.close()
    assert sorted(b for bodies in served.values() for b in bodies) == shared


def test_unmatched_request_raises_in_its_own_thread_only(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(counting_app())
    with agenttape.use_cassette(cassette_path, mode="all"), httpx.Client() as client:
        for number in range(THREADS):
            client.get(f"{server.url}/t/{number}/0")
    server.stop()
    stray = 7
    results: dict[int, bytes] = {}
    client = shared_client()

    def replay(number: int) -> None:
        path = f"/not-recorded/{number}" if number == stray else f"/t/{number}/0"
        results[number] = client.get(f"{server.url}{path}").content

    with client, agenttape.use_cassette(cassette_path, mode="none") as tape:
        errors = run_threads(replay)
        assert [i.request.url for i in tape.unplayed] == [f"{server.url}/t/{stray}/0"]
    assert list(errors) == [stray]
    assert isinstance(errors[stray], agenttape.UnmatchedInteractionError)
    assert f"/not-recorded/{stray}" in str(errors[stray])
    assert results == {n: path_body(f"/t/{n}/0", 64) for n in range(THREADS) if n != stray}


async def test_asyncio_tasks_record_each_interaction_once_and_replay_each_its_own(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(counting_app())

    async def fetch(client: httpx.AsyncClient, number: int) -> bytes:
        return (await client.get(f"{server.url}/task/{number}")).content

    # All tasks reach the cassette at once; the pool only bounds the sockets opened.
    limits = httpx.Limits(max_connections=20)
    async with (
        agenttape.use_cassette(cassette_path, mode="all"),
        httpx.AsyncClient(limits=limits) as client,
    ):
        bodies = await asyncio.gather(*(fetch(client, n) for n in range(TASKS)))
        shared = await asyncio.gather(*(client.get(f"{server.url}/shared") for _ in range(TASKS)))
    assert bodies == [path_body(f"/task/{n}", 64) for n in range(TASKS)]
    recorded = (await asyncio.to_thread(agenttape.load, cassette_path)).interactions
    counts = Counter(i.request.url for i in recorded)
    assert counts == Counter(
        {**{f"{server.url}/task/{n}": 1 for n in range(TASKS)}, f"{server.url}/shared": TASKS}
    )
    server.stop()

    async with (
        agenttape.use_cassette(cassette_path, mode="none") as tape,
        httpx.AsyncClient(limits=limits) as client,
    ):
        replayed = await asyncio.gather(*(fetch(client, n) for n in range(TASKS)))
        replayed_shared = await asyncio.gather(
            *(client.get(f"{server.url}/shared") for _ in range(TASKS))
        )
    assert tape.all_played
    assert replayed == bodies
    assert sorted(r.content for r in replayed_shared) == sorted(r.content for r in shared)


async def test_unmatched_request_fails_its_own_task_only(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(counting_app())
    async with agenttape.use_cassette(cassette_path, mode="all"), httpx.AsyncClient() as client:
        await asyncio.gather(*(client.get(f"{server.url}/task/{n}") for n in range(20)))
    server.stop()
    async with agenttape.use_cassette(cassette_path, mode="none"), httpx.AsyncClient() as client:
        outcomes = await asyncio.gather(
            *(client.get(f"{server.url}/task/{n}") for n in range(20)),
            client.get(f"{server.url}/task/not-recorded"),
            return_exceptions=True,
        )
    assert all(isinstance(o, httpx.Response) for o in outcomes[:20])
    assert isinstance(outcomes[20], agenttape.UnmatchedInteractionError)


@pytest.mark.parametrize("rounds", [3])
def test_threads_append_in_new_episodes_without_loss(
    serve: Callable[..., Server], cassette_path: Path, rounds: int
) -> None:
    server = serve(counting_app())
    client = shared_client()
    for round_number in range(rounds):

        def work(number: int, round_number: int = round_number) -> None:
            client.get(f"{server.url}/t/{number}/{round_number}")

        with agenttape.use_cassette(cassette_path, mode="new_episodes"):
            assert run_threads(work) == {}
    client.close()
    urls = Counter(i.request.url for i in agenttape.load(cassette_path).interactions)
    assert urls == Counter(
        {f"{server.url}/t/{n}/{r}": 1 for n in range(THREADS) for r in range(rounds)}
    )
