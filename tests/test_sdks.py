"""The real openai and anthropic SDKs (httpx2 underneath) against the local API stand-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from llm_standin import StandIn

import agenttape

OPENAI_KEY = "sk-proj-FAKEopenaiKEY0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-FAKEanthropicKEY0123456789abcdef"
MESSAGES = [{"role": "user", "content": "My order arrived broken"}]


def openai_run(base_url: str) -> list[Any]:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=OPENAI_KEY, max_retries=2)
    plain = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    deltas = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
    return [plain.model_dump(), deltas]


def anthropic_run(base_url: str) -> list[Any]:
    client = anthropic.Anthropic(base_url=base_url, api_key=ANTHROPIC_KEY, max_retries=2)
    plain = client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=MESSAGES)  # type: ignore[arg-type]
    with client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=64, messages=MESSAGES
    ) as stream:  # type: ignore[arg-type]
        text = list(stream.text_stream)
        final = stream.get_final_message().model_dump()
    return [plain.model_dump(), text, final]


@pytest.mark.parametrize("run", [openai_run, anthropic_run], ids=["openai", "anthropic"])
def test_sdk_records_then_replays_offline(run: Any, cassette_path: Path) -> None:
    with StandIn(rate_limit_first=1, retry_after="0") as api:
        with agenttape.use_cassette(cassette_path, mode="once") as recording:
            live = run(api.url)
        url = api.url
    statuses = [i.response.status for i in recording.interactions if i.response]
    assert statuses == [429, 200, 200], "first call rate-limited, retried by the SDK"
    with agenttape.use_cassette(cassette_path) as replay:
        replayed = run(url)
    assert replayed == live
    assert replay.all_played and replay.play_count == 3
    assert len(live[1]) > 3, "the stream arrived as several events"
    data = cassette_path.read_bytes()
    assert OPENAI_KEY.encode() not in data and ANTHROPIC_KEY.encode() not in data


async def test_async_openai_stream_replays(cassette_path: Path) -> None:
    async def run(base_url: str) -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=OPENAI_KEY)
        stream = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
        )
        return [chunk.model_dump() async for chunk in stream]

    with StandIn() as api:
        async with agenttape.use_cassette(cassette_path, mode="once"):
            live = await run(api.url)
        url = api.url
    async with agenttape.use_cassette(cassette_path):
        assert await run(url) == live


def test_identical_sdk_calls_replay_in_recorded_order(cassette_path: Path) -> None:
    def run(base_url: str) -> list[str]:
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=OPENAI_KEY)
        return [
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES).id  # type: ignore[arg-type]
            for _ in range(3)
        ]

    with StandIn() as api:
        with agenttape.use_cassette(cassette_path, mode="once"):
            live = run(api.url)
        url = api.url
    assert live == ["chatcmpl-standin-0", "chatcmpl-standin-1", "chatcmpl-standin-2"]
    with agenttape.use_cassette(cassette_path):
        assert run(url) == live
