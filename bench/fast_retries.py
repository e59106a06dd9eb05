"""Replay time of a recorded 429 (retry-after: 1) -> retry -> 200 flow, fast_retries on and off.

    python bench/fast_retries.py [--runs 5]

Records once from the local stand-in (one 429, then 200), for the openai and anthropic SDKs,
then replays each cassette offline and prints the median wall time per replay.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import anthropic
import openai
from llm_standin import StandIn

import agenttape

MESSAGES = [{"role": "user", "content": "Where is my order?"}]


def openai_asker(url: str) -> Callable[[], object]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-bench", max_retries=2)
    return lambda: client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]


def anthropic_asker(url: str) -> Callable[[], object]:
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-bench", max_retries=2)
    return lambda: client.messages.create(
        model="claude-opus-4-6",
        max_tokens=64,
        messages=MESSAGES,  # type: ignore[arg-type]
    )


def measure(path: Path, ask: Callable[[], object], runs: int, fast: bool) -> float:
    """Median time of one replayed call (client built beforehand), cassette load included."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        with agenttape.use_cassette(path, fast_retries=fast) as tape:
            ask()
        times.append(time.perf_counter() - start)
        assert tape.all_played
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for name, asker in (("openai", openai_asker), ("anthropic", anthropic_asker)):
            path = Path(scratch) / f"{name}.msgpack"
            with StandIn(rate_limit_first=1, retry_after="1") as api:
                ask = asker(api.url)
                start = time.perf_counter()
                with agenttape.use_cassette(path, mode="all"):
                    ask()
                live = time.perf_counter() - start
            on = measure(path, ask, args.runs, fast=True)
            off = measure(path, ask, args.runs, fast=False)
            print(
                f"{name:<10} live {live * 1000:7.1f} ms | replay fast_retries=True "
                f"{on * 1000:7.1f} ms | fast_retries=False {off * 1000:7.1f} ms "
                f"(median of {args.runs})"
            )


if __name__ == "__main__":
    main()
