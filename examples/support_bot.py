"""A two-step support agent on the openai SDK, replayed offline from a shipped cassette.

    python examples/support_bot.py              # replay cassettes/support_bot.msgpack, offline
    python examples/support_bot.py --standin    # record afresh from the local API stand-in
    python examples/support_bot.py --record     # record afresh from OpenAI (needs OPENAI_API_KEY)

The agent code (``classify``, ``answer``) knows nothing about agenttape.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import openai

import agenttape

ROOT = Path(__file__).resolve().parent.parent
CASSETTE = ROOT / "cassettes" / "support_bot.msgpack"
MODEL = "gpt-4o-mini"
MESSAGE = "My order #1234 arrived broken and nobody answers my emails. I want this fixed."
# The shipped cassette was recorded from a stand-in on a random local port; replay matches on
# method, path and body so it serves the same calls whatever base URL the SDK is given.
MATCH_ON = ("method", "path", "body")


def classify(client: openai.OpenAI, message: str) -> str:
    completion = client.chat.completions.create(
        model=MODEL,
        temperature=0,
        messages=[
            {
                "role": "system",
                "content": "Classify the sentiment of the customer message. "
                "Answer with one word: positive or negative.",
            },
            {"role": "user", "content": message},
        ],
    )
    return (completion.choices[0].message.content or "").strip().lower()


def answer(client: openai.OpenAI, message: str, sentiment: str) -> str:
    completion = client.chat.completions.create(
        model=MODEL,
        temperature=0.3,
        messages=[
            {
                "role": "system",
                "content": f"You are a support agent. The customer's sentiment is {sentiment}. "
                "Write a short, concrete reply.",
            },
            {"role": "user", "content": message},
        ],
    )
    return completion.choices[0].message.content or ""


def support_bot(message: str) -> tuple[str, str]:
    client = openai.OpenAI()
    sentiment = classify(client, message)
    return sentiment, answer(client, message, sentiment)


def record(message: str, standin: bool) -> None:
    if standin:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from llm_standin import StandIn

        api = StandIn()
        os.environ["OPENAI_BASE_URL"] = f"{api.url}/v1"
        os.environ.setdefault("OPENAI_API_KEY", "sk-standin-placeholder")
    elif not os.environ.get("OPENAI_API_KEY"):
        sys.exit("--record talks to OpenAI and needs OPENAI_API_KEY (or use --standin)")
    with agenttape.use_cassette(CASSETTE, mode="all", match_on=MATCH_ON):
        sentiment, reply = support_bot(message)
    if standin:
        api.stop()
    print(f"recorded {CASSETTE.relative_to(ROOT)}\nsentiment: {sentiment}\nreply: {reply}")


def replay(message: str) -> None:
    with agenttape.use_cassette(CASSETTE, match_on=MATCH_ON) as tape:
        sentiment, reply = support_bot(message)
    recorded = tape.metadata["created_at"]
    print(f"customer:  {message}")
    print(f"sentiment: {sentiment}")
    print(f"reply:     {reply}")
    print()
    print(
        f"Replayed {tape.play_count} of {len(tape.interactions)} recorded interactions from "
        f"{CASSETTE.relative_to(ROOT)} (recorded {recorded:%Y-%m-%d %H:%M} UTC), "
        "offline, with no API key:"
    )
    for number, interaction in enumerate(tape.interactions, 1):
        response = interaction.response
        assert response is not None
        path = interaction.request.url.split("//", 1)[-1].split("/", 1)[-1]
        print(
            f"  {number}. {interaction.request.method} /{path} -> {response.status} "
            f"{response.reason}, {len(response.body)} bytes, "
            f"recorded in {(interaction.duration or 0) * 1000:.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay (default) or record the support bot.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--record", action="store_true", help="record from OpenAI")
    group.add_argument("--standin", action="store_true", help="record from the local stand-in")
    parser.add_argument("--message", default=MESSAGE)
    args = parser.parse_args()
    if args.record or args.standin:
        record(args.message, standin=args.standin)
    else:
        replay(args.message)


if __name__ == "__main__":
    main()
