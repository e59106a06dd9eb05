"""A process that records, appends or redacts (the ``agenttape redact`` command), for the crash
and multi-process tests.

Run as a script: it prints a marker line (flushed) before and after each step, so the test
that kills it can tell where the kill landed.
"""

from __future__ import annotations

import argparse
import io
import sys
import time

import httpx

import agenttape
from agenttape._tools.cli import main as agenttape_cli

T0 = time.perf_counter()


def mark(step: str) -> None:
    sys.stdout.write(f"{time.perf_counter() - T0:.6f} {step}\n")
    sys.stdout.flush()


def record(path: str, mode: str, url: str, tag: str, count: int, blocks: int) -> None:
    """``blocks`` cassette activations of ``count`` requests each, every URL unique to ``tag``."""
    with httpx.Client() as client:
        for block in range(blocks):
            with agenttape.use_cassette(path, mode=mode):
                for index in range(count):
                    response = client.get(f"{url}/item/{tag}/{block}/{index}")
                    response.raise_for_status()
                    mark(f"request {block} {index}")
                mark("saving")
            mark("saved")


def redact(path: str, header: str) -> None:
    """``agenttape redact`` in place, as a user runs it (its output kept off the markers)."""
    mark("saving")
    status = agenttape_cli(["redact", path, "--header", header], out=io.StringIO())
    mark("saved")
    if status:
        sys.exit(status)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=("record", "redact"))
    parser.add_argument("path")
    parser.add_argument("--mode", default="all")
    parser.add_argument("--url", default="")
    parser.add_argument("--tag", default="w")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--header", default="x-trace")
    args = parser.parse_args()
    mark("start")
    if args.action == "record":
        record(args.path, args.mode, args.url, args.tag, args.count, args.blocks)
    else:
        redact(args.path, args.header)
    mark("exit")


if __name__ == "__main__":
    main()
