from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from llm_standin import StandIn

import agenttape
from agenttape import LLMCall
from agenttape._core.models import Interaction, Request, Response
from agenttape._tools.export import exchange_json
from agenttape._tools.reading import LLM_FIELDS, llm_fields, model_of
from agenttape._tools.show import detail


def _summaries(path: Path) -> list[LLMCall | None]:
    return [i.llm for i in agenttape.load(path).interactions]


def test_openai_chat_and_responses_bodies_as_the_sdk_sends_them(
    cassette_path: Path, standin: StandIn
) -> None:
    client = openai.OpenAI(base_url=f"{standin.url}/v1", api_key="sk-test", max_retries=0)
    with agenttape.use_cassette(cassette_path, mode="once"):
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            temperature=0.2,
            top_p=0.9,
            seed=42,
            max_completion_tokens=64,
        )
        for _ in client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass
        # The stand-in has no Responses API: the 404 is recorded all the same.
        with pytest.raises(openai.NotFoundError):
            client.responses.create(
                model="gpt-4.1", input="hi", temperature=0.0, max_output_tokens=100
            )
    chat, streamed, responses = _summaries(cassette_path)
    assert chat == LLMCall(
        provider="openai",
        api="chat.completions",
        model="gpt-4o-mini",
        temperature=0.2,
        top_p=0.9,
        seed=42,
        stream=False,
        max_tokens=64,
    )
    assert streamed == LLMCall(
        provider="openai", api="chat.completions", model="gpt-4o", stream=True
    )
    assert responses == LLMCall(
        provider="openai", api="responses", model="gpt-4.1", temperature=0.0, max_tokens=100
    )


def test_anthropic_messages_body_as_the_sdk_sends_it(cassette_path: Path, standin: StandIn) -> None:
    client = anthropic.Anthropic(base_url=standin.url, api_key="sk-ant-test", max_retries=0)
    with agenttape.use_cassette(cassette_path, mode="once"):
        client.messages.create(
            model="claude-opus-4-6",
            max_tokens=256,
            messages=[{"role": "user", "content": "hi"}],
            # anthropic 2.x has no sampling keywords; older SDKs and raw calls still send them.
            extra_body={"temperature": 1.0, "top_p": 0.5},
        )
        with client.messages.stream(
            model="claude-haiku-4-5", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            stream.until_done()
    assert _summaries(cassette_path) == [
        LLMCall(
            provider="anthropic",
            api="messages",
            model="claude-opus-4-6",
            temperature=1.0,
            top_p=0.5,
            max_tokens=256,
        ),
        LLMCall(
            provider="anthropic",
            api="messages",
            model="claude-haiku-4-5",
            stream=True,
            max_tokens=32,
        ),
    ]


def test_gemini_generate_content_body(cassette_path: Path, standin: StandIn) -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"temperature": 0.7, "topP": 0.95, "seed": 7, "maxOutputTokens": 512},
    }
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.post(f"{standin.url}/v1beta/models/gemini-2.5-flash:generateContent", json=body)
        httpx.post(
            f"{standin.url}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            json={"contents": body["contents"]},
        )
    assert _summaries(cassette_path) == [
        LLMCall(
            provider="gemini",
            api="generateContent",
            model="gemini-2.5-flash",
            temperature=0.7,
            top_p=0.95,
            seed=7,
            max_tokens=512,
        ),
        LLMCall(
            provider="gemini", api="streamGenerateContent", model="gemini-2.5-pro", stream=True
        ),
    ]


def _interaction(url: str, body: bytes, boundary: str = "http") -> Interaction:
    return Interaction(
        request=Request("POST", url, [], body), response=Response(200), boundary=boundary
    )


@pytest.mark.parametrize(
    ("url", "body", "expected"),
    [
        (
            "https://x.openai.azure.com/openai/deployments/prod-gpt4o/chat/completions?api-version=1",
            {"messages": [], "max_tokens": 10},
            LLMCall(provider="openai", api="chat.completions", model="prod-gpt4o", max_tokens=10),
        ),
        (
            "https://aiplatform.googleapis.com/v1/projects/p/locations/l/publishers/google/"
            "models/gemini-2.0-flash:generateContent",
            {"contents": []},
            LLMCall(provider="gemini", api="generateContent", model="gemini-2.0-flash"),
        ),
        (
            "https://api.openai.com/v1/chat/completions",
            {"model": "m", "temperature": "hot", "seed": True, "stream": "yes"},
            LLMCall(provider="openai", api="chat.completions", model="m"),
        ),
    ],
)
def test_other_shapes(url: str, body: dict[str, object], expected: LLMCall) -> None:
    assert _interaction(url, json.dumps(body).encode()).llm == expected


@pytest.mark.parametrize(
    ("url", "body", "boundary"),
    [
        ("https://example.com/orders", b'{"model": "x"}', "http"),
        ("https://api.openai.com/v1/threads/thread_1/messages", b'{"role": "user"}', "http"),
        ("https://bedrock.us-east-1.amazonaws.com/foundation-models", b'{"model": "x"}', "http"),
        ("https://api.openai.com/v1/chat/completions", b"not json", "http"),
        ("https://api.openai.com/v1/chat/completions", b"", "http"),
        ("https://api.openai.com/v1/chat/completions", b"[1, 2]", "http"),
        ("https://api.anthropic.com/v1/messages", b"{broken", "http"),
        ("tool://messages", b'{"model": "x"}', "tool:messages"),
    ],
)
def test_not_an_llm_call(url: str, body: bytes, boundary: str) -> None:
    interaction = _interaction(url, body, boundary)
    assert interaction.llm is None
    assert llm_fields(interaction) is None and model_of(interaction) == ""


BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com/model"
SONNET = "anthropic.claude-3-5-sonnet-20240620-v1:0"
ESCAPED_SONNET = "anthropic.claude-3-5-sonnet-20240620-v1%3A0"  # as boto3 sends it
ANTHROPIC_ON_BEDROCK = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 256,
    "temperature": 0.4,
    "top_p": 0.9,
    "messages": [],
}
CONVERSE = {"messages": [], "inferenceConfig": {"temperature": 0.3, "topP": 0.8, "maxTokens": 99}}
INVOKE_SAMPLING: dict[str, Any] = {"temperature": 0.4, "top_p": 0.9, "max_tokens": 256}
CONVERSE_SAMPLING: dict[str, Any] = {"temperature": 0.3, "top_p": 0.8, "max_tokens": 99}


@pytest.mark.parametrize(
    ("url", "body", "expected"),
    [
        pytest.param(
            "https://x.openai.azure.com/openai/deployments/prod-gpt4o/chat/completions"
            "?api-version=2024-10-21",
            {"messages": [], "temperature": 0.2, "top_p": 0.5, "max_tokens": 10, "stream": True},
            LLMCall(
                provider="openai",
                api="chat.completions",
                model="prod-gpt4o",
                temperature=0.2,
                top_p=0.5,
                stream=True,
                max_tokens=10,
            ),
            id="azure-deployment",
        ),
        pytest.param(
            f"{BEDROCK}/{ESCAPED_SONNET}/invoke",
            ANTHROPIC_ON_BEDROCK,
            LLMCall(provider="bedrock", api="invoke", model=SONNET, **INVOKE_SAMPLING),
            id="bedrock-invoke",
        ),
        pytest.param(
            f"{BEDROCK}/{ESCAPED_SONNET}/invoke-with-response-stream",
            ANTHROPIC_ON_BEDROCK,
            LLMCall(
                provider="bedrock",
                api="invoke-with-response-stream",
                model=SONNET,
                stream=True,
                **INVOKE_SAMPLING,
            ),
            id="bedrock-invoke-stream",
        ),
        pytest.param(
            f"{BEDROCK}/{ESCAPED_SONNET}/converse",
            CONVERSE,
            LLMCall(provider="bedrock", api="converse", model=SONNET, **CONVERSE_SAMPLING),
            id="bedrock-converse",
        ),
        pytest.param(
            f"{BEDROCK}/{ESCAPED_SONNET}/converse-stream",
            CONVERSE,
            LLMCall(
                provider="bedrock",
                api="converse-stream",
                model=SONNET,
                stream=True,
                **CONVERSE_SAMPLING,
            ),
            id="bedrock-converse-stream",
        ),
        pytest.param(
            "https://api.openai.com/v1/embeddings",
            {"model": "text-embedding-3-small", "input": "hi"},
            LLMCall(provider="openai", api="embeddings", model="text-embedding-3-small"),
            id="embeddings",
        ),
        pytest.param(
            "https://api.openai.com/v1/chat/completions",
            {"model": "gpt-4o", "temperature": "0.7", "top_p": "1", "max_tokens": "64"},
            LLMCall(provider="openai", api="chat.completions", model="gpt-4o"),
            id="string-temperature",
        ),
    ],
)
def test_interaction_llm_show_and_export_agree(
    url: str, body: dict[str, object], expected: LLMCall
) -> None:
    """One reader: Interaction.llm, the show table and detail, and the export say the same.

    A numeric string (``"temperature": "0.7"``) is not a number: every view reports None.
    """
    interaction = _interaction(url, json.dumps(body).encode())
    assert interaction.llm == expected
    fields = {name: getattr(expected, name) for name in LLM_FIELDS}
    assert llm_fields(interaction) == fields
    assert exchange_json(interaction, lambda _headers, _body: {})["llm"] == fields
    assert model_of(interaction) == expected.model
    shown = ", ".join(f"{k} {json.dumps(v)}" for k, v in fields.items() if v is not None)
    assert f"llm {shown}\n" in detail(0, interaction)
