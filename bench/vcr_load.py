"""The first read of vcrpy cassettes through agenttape's pytest-recording drop-in, stage by
stage, beside vcrpy's own read of the same files: what a suite's cold run (an empty parse
cache) pays per cassette.

    python -m bench.vcr_load tests/cassettes                 # every .yaml below, vcrpy's serializer
    python -m bench.vcr_load cassettes/ --serializer tests.json_body_serializer
    python -m bench.vcr_load cassettes/ --profile 25         # and cProfile's top 25 of the cold read

Per cassette, best of ``--runs`` in this process: vcrpy's ``vcr.serialize.deserialize`` with the
serializer; agenttape's bounds check (``check_yaml``), the same deserialize and the parse-cache
entry (key, msgpack, write); then ``deserialize_cached`` whole, what the drop-in's persister
does per file, with an empty cache (cold) and with the entry it left (warm); and apart, the
conversion of every interaction to agenttape's model, which the drop-in pays per interaction
when one is first played. The file's own read is left out (both read it alike).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAGES = ("vcrpy", "check", "load", "cache", "cold", "warm", "convert")


@dataclass(slots=True)
class Cassette:
    path: Path
    text: str
    best: dict[str, float] = field(default_factory=dict)


def best_of(runs: int, work: Callable[[], object]) -> float:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def measure(cassette: Cassette, serializer: Any, runs: int, cache: Path) -> None:
    import msgpack
    from vcr.serialize import deserialize

    from agenttape._core.redaction import Redactor
    from agenttape._tools import vcr_cache
    from agenttape._tools.vcr import check_yaml, interaction_of

    text, name = cassette.text, str(cassette.path)
    loaded = deserialize(text, serializer)
    entry = cache / "vcr" / "bench.msgpack"

    def cache_entry() -> None:
        data = text.encode("utf-8", "surrogatepass")
        hashlib.blake2b(data + b"\0", digest_size=20).hexdigest()
        stored = ["bench", [request._to_dict() for request in loaded[0]], *loaded[1:]]
        (cache / "vcr").mkdir(mode=0o700, exist_ok=True)
        entry.write_bytes(msgpack.packb(stored, use_bin_type=True))

    def convert() -> None:
        redactor = Redactor.from_rules(None)
        for request, response in zip(loaded[0], loaded[1], strict=True):
            interaction_of(request, response, redactor)

    def cold() -> None:
        for stale in (cache / "vcr").glob("*.msgpack"):
            stale.unlink()
        vcr_cache.deserialize_cached(text, serializer, name)

    best = cassette.best
    best["vcrpy"] = best_of(runs, lambda: deserialize(text, serializer))
    best["check"] = best_of(runs, lambda: check_yaml(text, name))
    best["load"] = best_of(runs, lambda: deserialize(text, serializer))
    best["cache"] = best_of(runs, cache_entry)
    best["convert"] = best_of(runs, convert)
    best["cold"] = best_of(runs, cold)
    vcr_cache.deserialize_cached(text, serializer, name)
    best["warm"] = best_of(runs, lambda: vcr_cache.deserialize_cached(text, serializer, name))


def table(cassettes: list[Cassette]) -> str:
    head = "| cassette | KB | " + " | ".join(f"{stage} ms" for stage in STAGES) + " | cold/vcrpy |"
    lines = [head, "|---" + "|---:" * (len(STAGES) + 2) + "|"]
    totals = dict.fromkeys(STAGES, 0.0)
    for cassette in cassettes:
        for stage in STAGES:
            totals[stage] += cassette.best[stage]
        cells = " | ".join(f"{cassette.best[stage] * 1000:.1f}" for stage in STAGES)
        ratio = cassette.best["cold"] / cassette.best["vcrpy"]
        kilobytes = len(cassette.text.encode()) / 1024
        lines.append(f"| {cassette.path.name} | {kilobytes:.0f} | {cells} | {ratio:.2f} |")
    cells = " | ".join(f"**{totals[stage] * 1000:.0f}**" for stage in STAGES)
    size = sum(len(cassette.text.encode()) for cassette in cassettes) / 1024
    ratio = totals["cold"] / totals["vcrpy"]
    lines.append(f"| **{len(cassettes)} files** | {size:.0f} | {cells} | **{ratio:.2f}** |")
    return "\n".join(lines)


def profile_cold(cassettes: list[Cassette], serializer: Any, cache: Path, top: int) -> None:
    """cProfile of the drop-in's cold read (bounds check, load, cache entry) over every file
    once."""
    from agenttape._tools import vcr_cache

    for stale in (cache / "vcr").glob("*.msgpack"):
        stale.unlink()
    profile = cProfile.Profile()
    profile.enable()
    for cassette in cassettes:
        vcr_cache.deserialize_cached(cassette.text, serializer, str(cassette.path))
    profile.disable()
    pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--serializer", help="a project's own: module, or module:attribute")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=int, metavar="TOP", default=0)
    options = parser.parse_args()
    from vcr.serializers import yamlserializer

    from agenttape._tools.vcr import load_serializer

    serializer: Any = yamlserializer
    if options.serializer and ":" in options.serializer:
        serializer = load_serializer(options.serializer)
    elif options.serializer:
        sys.path.insert(0, os.getcwd())
        serializer = importlib.import_module(options.serializer)
    paths = sorted(path for folder in options.folders for path in folder.rglob("*.yaml"))
    cassettes = [Cassette(path, path.read_text(encoding="utf-8")) for path in paths]
    cache = Path(tempfile.mkdtemp(prefix="agenttape-bench-vcr-load-"))
    os.environ["AGENTTAPE_CACHE_DIR"] = str(cache)
    for cassette in cassettes:
        measure(cassette, serializer, options.runs, cache)
    print(table(cassettes))
    if options.profile:
        profile_cold(cassettes, serializer, cache, options.profile)


if __name__ == "__main__":
    main()
