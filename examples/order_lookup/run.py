"""Re-enact the order-lookup failure offline, then run the fixed agent against the same run.

python examples/order_lookup/run.py            # replay from cassettes/, no network
python examples/order_lookup/run.py --record   # record again from the local LLM stand-in
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
from llm_standin import StandIn

import agenttape
from order_lookup import agent, fixed_agent, shop

CASSETTE = Path(__file__).resolve().with_name("cassettes") / "wrong_order.msgpack"
PORT = 8765
USER = "u_alice"
QUESTION = "Hi, where is my kettle order?"
TAGS = {"user_id": USER, "tenant_id": "t_shop", "session_id": "s_4711"}
# The model's second reply is pinned whatever the tool now returns (the tool message is the
# fourth): the fixed agent must cope with the answer the model actually gave.
PIN_MODEL = ("messages[3].content",)


def client(port: int = PORT) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-standin")


def record(path: Path = CASSETTE, port: int = PORT) -> str:
    """The production run: the buggy agent against the stand-in, everything recorded."""
    shop.create(shop.DATABASE)
    with StandIn(port=port) as api, agenttape.use_cassette(path, mode="all", tags=TAGS):
        return agent.answer(client(api.port), USER, QUESTION)


def replay_wrong(path: Path = CASSETTE) -> str:
    """The same run offline: the model's replies and the tool's result come from the
    cassette; the tool is frozen, so the database is never touched."""
    with agenttape.use_cassette(path, frozen=["tool:lookup_order"]):
        return agent.answer(client(), USER, QUESTION)


def replay_fixed(path: Path = CASSETTE) -> str:
    """The fixed agent on the recorded run: the model is pinned to what it said; the fixed
    tool runs for real (its input changed) and that run goes to a derived cassette."""
    shop.create(shop.DATABASE)
    with agenttape.use_cassette(path, live=["tool:lookup_order"], ignore_json_fields=PIN_MODEL):
        return fixed_agent.answer(client(), USER, QUESTION)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record again from the stand-in")
    args = parser.parse_args()
    if args.record:
        print(f"recorded to {CASSETTE}:\n  {record()}")
    tape = agenttape.load(CASSETTE)
    print(f"cassette {CASSETTE.name}: run {tape.metadata['run_id']}, tags {tape.metadata['tags']}")
    for interaction in tape.interactions:
        llm = interaction.llm
        what = f"model={llm.model} temperature={llm.temperature} seed={llm.seed}" if llm else ""
        print(f"  {interaction.boundary:<18} {interaction.request.url:<40} {what}")
    print(f"\n{USER} asked: {QUESTION}")
    print(f"replayed agent answered: {replay_wrong()}")
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / CASSETTE.name
        shutil.copyfile(CASSETTE, copy)
        print(f"fixed agent answers:     {replay_fixed(copy)}")


if __name__ == "__main__":
    main()
