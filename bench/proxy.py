"""The recording proxy's costs on loopback, each against the same work done with no proxy:

1. recording overhead: 2,000 GETs (2 KiB JSON each, httpx with keep-alive) through
   ``agenttape proxy --mode all`` vs the same GETs made directly, blocks taken in turn; the
   cassette write when the proxy stops counts;
2. an agent-like load: 10 streamed chat completions (the openai SDK against the local LLM
   stand-in, 20 events 5 ms apart), recorded through the proxy vs direct;
3. first SSE chunk while recording (the server pauses 200 ms after it): through the proxy
   minus direct;
4. replay of the 2,000 GETs by the proxy (mode ``none``, the server stopped) vs the live
   proxy-less run.

    python -m bench.proxy                 # about two minutes on two cores
    python -m bench.proxy --pairs 3 --json results.json

Not part of ``python -m bench``: the proxy serves other programs, so there is no in-process
peer to compare with; the figures go to docs/proxy.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench._fixtures import SSE_EVENTS, item_path
from bench._harness import serve

ROOT = Path(__file__).resolve().parent.parent
COUNT = 2000


@contextmanager
def proxy(cassette: Path, mode: str, config: Path) -> Iterator[str]:
    """``agenttape proxy`` in a process of its own; yields its URL, stops it (saving) after."""
    environment = {**os.environ, "AGENTTAPE_CONFIG_DIR": str(config)}
    process = subprocess.Popen(
        [sys.executable, "-m", "agenttape", "proxy", "--cassette", str(cassette), "--mode", mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=ROOT,
    )
    assert process.stdout is not None
    found = re.search(r"http://127\.0\.0\.1:\d+", process.stdout.readline())
    if found is None:
        process.kill()
        raise RuntimeError(f"the proxy did not start: {process.stderr.read()}")  # type: ignore[union-attr]
    try:
        yield found.group(0)
    finally:
        process.send_signal(signal.SIGTERM)
        _out, errors = process.communicate(timeout=120)
        if process.returncode != 0:
            raise RuntimeError(f"the proxy failed: {errors}")


def gets(base: str, proxy_url: str | None) -> float:
    """Seconds for COUNT GETs on one keep-alive client."""
    with httpx.Client(proxy=proxy_url, timeout=30) as client:
        start = time.perf_counter()
        for i in range(COUNT):
            response = client.get(base + item_path(i))
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code} for {item_path(i)}")
        return time.perf_counter() - start


def first_chunk(base: str, proxy_url: str | None, times: int = 15) -> float:
    """Median seconds from sending a request to its first SSE chunk."""
    samples = []
    with httpx.Client(proxy=proxy_url, timeout=30) as client:
        for _ in range(times):
            start = time.perf_counter()
            with client.stream("GET", base + "/stream") as response:
                pieces = response.iter_raw()
                next(pieces)
                samples.append(time.perf_counter() - start)
                rest = b"".join(pieces)
            if not rest.endswith(SSE_EVENTS[-1]):
                raise RuntimeError("the stream came back changed")
    return statistics.median(samples)


def chats(base: str, proxy_url: str | None) -> None:
    import openai

    client = openai.OpenAI(
        base_url=f"{base}/v1",
        api_key="sk-bench-placeholder",
        http_client=httpx.Client(proxy=proxy_url, timeout=30),
    )
    for n in range(10):
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": f"where is order {n}? " + "tell me more " * 5}],
            stream=True,
        )
        for _chunk in stream:
            pass


def in_turn(
    pairs: int, direct: Callable[[], float], through: Callable[[], float]
) -> dict[str, Any]:
    """Direct and proxied blocks taken in turn, so drift on a shared machine hits both."""
    ratios, direct_times, proxied_times = [], [], []
    for _ in range(pairs):
        a = direct()
        b = through()
        direct_times.append(a)
        proxied_times.append(b)
        ratios.append(b / a)
    return {
        "direct_s": statistics.median(direct_times),
        "proxy_s": statistics.median(proxied_times),
        "ratio": statistics.median(ratios),
        "ratios": [round(r, 3) for r in ratios],
    }


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agenttape-bench-proxy-"))
    config = work / "config"
    results: dict[str, Any] = {}
    serial = iter(range(10_000))

    with serve() as base:
        gets(base, None)  # warm the server and the client's imports

        def recorded_gets() -> float:
            with proxy(work / f"gets-{next(serial)}.msgpack", "all", config) as url:
                start = time.perf_counter()
                gets(base, url)
            return time.perf_counter() - start  # the cassette write on stop counts

        results["record_gets"] = in_turn(args.pairs, lambda: gets(base, None), recorded_gets)
        print(f"1. recording 2,000 GETs: {results['record_gets']['ratio']:.2f}x direct", flush=True)

        direct_first = first_chunk(base, None)
        with proxy(work / "first.msgpack", "all", config) as url:
            proxied_first = first_chunk(base, url)
        results["first_chunk"] = {
            "direct_ms": direct_first * 1000,
            "proxy_ms": proxied_first * 1000,
            "added_ms": (proxied_first - direct_first) * 1000,
        }
        print(f"3. first SSE chunk: +{results['first_chunk']['added_ms']:.2f} ms", flush=True)

        replay_cassette = work / "replay.msgpack"
        with proxy(replay_cassette, "all", config) as url:
            gets(base, url)
        live = [gets(base, None) for _ in range(args.pairs)]
    replayed = []
    for _ in range(args.pairs):  # a proxy replays each recorded response once: one per block
        with proxy(replay_cassette, "none", config) as url:
            replayed.append(gets(base, url))
    results["replay_gets"] = {
        "live_s": statistics.median(live),
        "replay_s": statistics.median(replayed),
        "ratio": statistics.median(replayed) / statistics.median(live),
    }

    sys.path.insert(0, str(ROOT / "examples"))
    from llm_standin import StandIn

    with StandIn(chunk_delay=0.005) as standin:
        chats(standin.url, None)

        def recorded_chats() -> float:
            with proxy(work / f"chats-{next(serial)}.msgpack", "all", config) as url:
                start = time.perf_counter()
                chats(standin.url, url)
            return time.perf_counter() - start

        results["record_chats"] = in_turn(
            args.pairs, lambda: timed(lambda: chats(standin.url, None)), recorded_chats
        )
    print(f"2. agent-like load: {results['record_chats']['ratio']:.2f}x direct", flush=True)
    print(f"4. proxy replay of 2,000 GETs: {results['replay_gets']['ratio']:.2f}x the live run")
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
