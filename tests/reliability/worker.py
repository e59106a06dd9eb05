"""A process that records, appends or redacts, for the crash and multi-process tests.

Run as a script: it prints a marker line (flushed) before and after each step, so the test
that kills it can tell where the kill landed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

import agenttape
from agenttape import _format
from agenttape._cassette import read, write_atomic
from agenttape._redaction import Redactor

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
    """In-place redaction of one request header in every interaction, through write_atomic."""
    header_data, interactions = read(path)
    redactor = Redactor.from_rules([f"header:{header}"])
    for interaction in interactions:
        interaction.request = redactor.request(interaction.request)
    data = _format.encode(header_data, interactions)
    mark("saving")
    write_atomic(Path(path), data)
    mark("saved")


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
