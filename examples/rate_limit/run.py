"""Re-enact the 3 PM rate-limit failure offline, then the fixed parser on the same run.

python examples/rate_limit/run.py             # replay from cassettes/, offline, no API key
python examples/rate_limit/run.py --times 5   # replay the failure five times
python examples/rate_limit/run.py --record    # record again from the local stand-ins

Scene 1: at peak the pricing API answered 429 with half a JSON error document; the price
tool read the rate limit in it as the price, and the agent quoted it. Scene 2: the agent's
Anthropic model answered 429 (retry-after: 1), the SDK waited and retried, and got a 200;
replay runs the SDK's own retry without the wait.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic
import openai
from llm_standin import StandIn
from pricing_standin import PricingAPI

import agenttape
from rate_limit import agent, prices

CASSETTES = Path(__file__).resolve().with_name("cassettes")
PEAK_CASSETTE = CASSETTES / "peak_price.msgpack"
RETRY_CASSETTE = CASSETTES / "anthropic_retry.msgpack"
LLM_PORT, PRICES_PORT = 8765, 8766
QUESTION = "How much is the kettle KTL-100 today?"
TAGS = {"user_id": "u_7710", "tenant_id": "t_shop", "scene": "peak"}


def llm_client(port: int = LLM_PORT) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-standin")


def claude_client(port: int = LLM_PORT) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{port}", api_key="sk-ant-standin", max_retries=2
    )


def record_peak(
    path: Path = PEAK_CASSETTE, llm_port: int = LLM_PORT, prices_port: int = PRICES_PORT
) -> tuple[str, int, int]:
    """The production run at peak, recorded: the shipped agent against both stand-ins.
    Returns the answer and the ports the stand-ins listened on."""
    with (
        StandIn(port=llm_port) as llm,
        PricingAPI(port=prices_port, peak=True) as pricing,
        agenttape.use_cassette(path, mode="all", tags=TAGS),
    ):
        reply = agent.answer(llm_client(llm.port), pricing.url, QUESTION)
    return reply, llm.port, pricing.port


def replay_peak(
    path: Path = PEAK_CASSETTE,
    parse: prices.Parser = prices.parse_price,
    llm_port: int = LLM_PORT,
    prices_port: int = PRICES_PORT,
) -> str:
    """The same run, offline: the model's replies and the pricing API's 429 come from the
    cassette, byte for byte; the price tool and its parser run for real."""
    with agenttape.use_cassette(path):
        return agent.answer(
            llm_client(llm_port), f"http://127.0.0.1:{prices_port}", QUESTION, parse
        )


def record_retry(path: Path = RETRY_CASSETTE, port: int = LLM_PORT) -> tuple[str, float, int]:
    """Claude at peak: one 429 with retry-after: 1, then a 200. Returns the answer, the live
    time in seconds and the stand-in's port."""
    with StandIn(port=port, rate_limit_first=1, retry_after="1") as llm:
        client = claude_client(llm.port)
        start = time.perf_counter()
        with agenttape.use_cassette(path, mode="all", tags=TAGS):
            reply = agent.ask_claude(client, QUESTION)
        return reply, time.perf_counter() - start, llm.port


def replay_retry(path: Path = RETRY_CASSETTE, port: int = LLM_PORT) -> tuple[str, float, list[int]]:
    """The 429 → retry → 200 flow offline with fast_retries (the default): the SDK's retry
    code runs, its wait does not. Returns the answer, the wall time in seconds and the
    statuses served."""
    client = claude_client(port)
    start = time.perf_counter()
    with agenttape.use_cassette(path) as tape:
        reply = agent.ask_claude(client, QUESTION)
    elapsed = time.perf_counter() - start
    unplayed = {id(interaction) for interaction in tape.unplayed}
    served = [i.response.status for i in tape.interactions if id(i) not in unplayed and i.response]
    return reply, elapsed, served


def live_ms(path: Path) -> float:
    """How long the recorded run took live, first request to last response."""
    interactions = agenttape.load(path).interactions
    first, last = interactions[0], interactions[-1]
    return (last.started_at + (last.duration or 0) - first.started_at) * 1000


def describe(path: Path) -> None:
    tape = agenttape.load(path)
    when = tape.metadata["created_at"]
    print(f"{path.name}: recorded {when:%Y-%m-%d %H:%M} UTC, tags {tape.metadata['tags']}")
    for interaction in tape.interactions:
        request, response = interaction.request, interaction.response
        assert response is not None
        line = f"  {request.method:<5}{request.url.split('//', 1)[-1]:<36} {response.status}"
        retry_after = [v for k, v in response.headers if k.lower() == "retry-after"]
        if response.status >= 400:
            line += (
                f"  retry-after: {retry_after[0] if retry_after else '-'}  body {response.body!r}"
            )
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record again from the stand-ins")
    parser.add_argument("--times", type=int, default=3, help="how many times to replay scene 1")
    args = parser.parse_args()
    if args.record:
        reply, _, _ = record_peak()
        print(f"recorded {PEAK_CASSETTE.name}: {reply}")
        reply, live, _ = record_retry()
        print(f"recorded {RETRY_CASSETTE.name} in {live * 1000:.0f} ms: {reply}\n")

    print("Scene 1: the 3 PM wrong price, replayed offline (no stand-in, no network, no key)")
    describe(PEAK_CASSETTE)
    print(f"\ncustomer asked: {QUESTION}")
    for number in range(1, args.times + 1):
        print(f"replay {number}, shipped parser: {replay_peak()}")
    print(f"replay, fixed parser:   {replay_peak(parse=prices.parse_price_fixed)}")

    print("\nScene 2: Claude answers 429, the SDK retries after 1 s, then 200")
    describe(RETRY_CASSETTE)
    reply, first, served = replay_retry()
    _, again, _ = replay_retry()
    print(
        f"live it took {live_ms(RETRY_CASSETTE):.0f} ms. Replayed offline, the SDK's own retry logic"
    )
    print(
        f"served {' -> '.join(map(str, served))} in {first * 1000:.1f} ms (one-time set-up included),"
    )
    print(f"and {again * 1000:.1f} ms the second time (fast_retries).\nClaude answered: {reply}")


if __name__ == "__main__":
    main()
