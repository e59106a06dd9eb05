"""Scenario 2: replay 2,000 POSTs of ~4 KB chat-style JSON, bodies part of the match."""

from __future__ import annotations

from bench._fixtures import chat_reply, chat_request
from bench._harness import Scenario
from bench._replay import Call, replay_scenario

COUNT = 2000


def main() -> None:
    scenario = Scenario(
        2,
        "Replay 2,000 POSTs, ~4 KB chat JSON, body matched",
        "µs/request",
        "floor",
        "bench.s2_replay_post",
    )
    calls = [Call("POST", "/v1/chat/completions", chat_request(i)) for i in range(COUNT)]
    expected = [chat_reply(i) for i in range(COUNT)]
    replay_scenario(scenario, "s2", calls, expected, body=True, vcrpy_sample=10, target=1.5)
    scenario.finish()


if __name__ == "__main__":
    main()
