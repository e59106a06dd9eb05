"""Scenario 14: replay 1,000 GETs through curl_cffi (its sockets live in libcurl), against a
floor that is the same client's session making the same GETs to the local bench server.

There is no in-memory floor to be had: curl_cffi reads only from libcurl, which reads only
from a socket. The floor is the process's CPU time for the live calls (libcurl's own work
and curl_cffi's response building), the server's own work being in a process of its own;
replay does curl_cffi's response building and agenttape's lookup, no libcurl transfer.
cassetter and vcrpy do not intercept curl_cffi, so they have no row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import item_body, item_path
from bench._harness import Scenario, serve
from bench._replay import line_against_floor, time_contestant

COUNT = 1000
TARGET = 1.3


def curl_cffi_calls(urls: list[str]) -> _peers.Calls:
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "session" not in state:
            from curl_cffi import requests

            state["session"] = requests.Session()
        session = state["session"]
        return [session.get(url).content for url in urls]

    return run


def _time(scenario: Scenario, work: Path, base: str) -> None:
    urls = [base + item_path(i) for i in range(COUNT)]
    expected = [item_body(i) for i in range(COUNT)]
    plan = [
        ("floor", _peers.no_cassette),
        ("agenttape", _peers.agenttape_opener(work / "gets.msgpack", mode="none")),
    ]
    for name, opener in plan:
        time_contestant(scenario, work, name, opener, curl_cffi_calls(urls), expected, COUNT, "")


def main() -> None:
    scenario = Scenario(
        14, "Replay 1,000 GETs through curl_cffi", "µs/request", "floor", "bench.s14_curl_cffi"
    )
    work = scenario.dir
    if scenario.is_worker:
        _time(scenario, work, (work / "base").read_text())
        return
    with serve() as base:  # the floor's calls are live: the server runs while they are timed
        (work / "base").write_text(base)
        urls = [base + item_path(i) for i in range(COUNT)]
        _peers.record_agenttape(work / "gets.msgpack", curl_cffi_calls(urls))
        _time(scenario, work, base)
    line_against_floor(scenario, work, TARGET)
    scenario.finish()


if __name__ == "__main__":
    main()
