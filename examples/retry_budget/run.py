"""Find the retry bug with one fault: the recorded run passes, a 30-second retry-after breaks it.

python examples/retry_budget/run.py            # replay from cassettes/, offline, no API key
python examples/retry_budget/run.py --record   # record again from the local stand-in
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
from llm_standin import StandIn

import agenttape
from retry_budget import agent

CASSETTE = Path(__file__).resolve().with_name("cassettes") / "support.msgpack"
PORT = 8767
QUESTION = "Where is my order 1042?"
LONG_WAIT = agenttape.fault("rate_limit", on="POST /v1/chat/completions", nth=1, retry_after=30)
"""The provider at peak: the first call is rate-limited for longer than the agent's budget."""


def client(port: int = PORT) -> openai.OpenAI:
    # max_retries=0: the agent's own retry code is under test, not the SDK's.
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-standin", max_retries=0
    )


def record(path: Path = CASSETTE, port: int = PORT) -> tuple[str, int]:
    """The agent's run as it happens on a quiet day, recorded."""
    with StandIn(port=port) as llm, agenttape.use_cassette(path, mode="all"):
        return agent.answer(client(llm.port), QUESTION), llm.port


def replay(
    path: Path = CASSETTE,
    port: int = PORT,
    faults: list[agenttape.Fault] | None = None,
    fixed: bool = False,
) -> str:
    """The recorded run, offline, with ``faults`` injected."""
    answer = agent.answer_fixed if fixed else agent.answer
    with agenttape.use_cassette(path, faults=faults or [], strict_faults=True):
        return answer(client(port), QUESTION)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record again from the stand-in")
    if parser.parse_args().record:
        print("recorded:", record()[0])
    print("replayed:", replay())
    try:
        replay(faults=[LONG_WAIT])
    except AttributeError as error:
        print(f"with a 30-second retry-after: {type(error).__name__}: {error}")
        for note in getattr(error, "__notes__", []):
            print(f"  {note}")
    print("fixed, with a 30-second retry-after:", replay(faults=[LONG_WAIT], fixed=True))


if __name__ == "__main__":
    main()
