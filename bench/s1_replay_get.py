"""Scenario 1: replay 2,000 distinct GETs with ~2 KB JSON bodies through httpx."""

from __future__ import annotations

from bench._fixtures import item_body, item_path
from bench._harness import Scenario
from bench._replay import Call, replay_scenario

COUNT = 2000


def main() -> None:
    scenario = Scenario(
        1, "Replay 2,000 GETs, ~2 KB JSON, httpx", "µs/request", "floor", "bench.s1_replay_get"
    )
    calls = [Call("GET", item_path(i)) for i in range(COUNT)]
    expected = [item_body(i) for i in range(COUNT)]
    replay_scenario(scenario, "s1", calls, expected, body=False, vcrpy_sample=20, target=1.3)
    scenario.finish()


if __name__ == "__main__":
    main()
