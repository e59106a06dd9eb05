"""Reading recorded bodies: content decoding, server-sent events, LLM call parameters."""

from __future__ import annotations

import gzip
import json
import zlib

from agenttape._core.models import Interaction, Request
from agenttape._tools.reading import (
    decode_within_budget,
    llm_fields,
    parse_sse,
    readable_body,
    sse_text,
)
from agenttape._tools.show import detail


def _post(url: str, body: object) -> Interaction:
    headers = [("content-type", "application/json")]
    return Interaction(Request("POST", url, headers, json.dumps(body).encode()))


def test_llm_fields_from_provider_request_bodies() -> None:
    openai = _post(
        "https://api.openai.com/v1/chat/completions",
        {
            "model": "gpt-4o",
            "temperature": 0,
            "top_p": 0.9,
            "seed": 3,
            "stream": True,
            "messages": [],
        },
    )
    assert llm_fields(openai) == {
        "provider": "openai",
        "model": "gpt-4o",
        "temperature": 0,
        "top_p": 0.9,
        "seed": 3,
        "stream": True,
        "max_tokens": None,
    }
    anthropic = _post(
        "https://api.anthropic.com/v1/messages",
        {"model": "claude-opus-4-1", "max_tokens": 512, "temperature": 0.5, "messages": []},
    )
    fields = llm_fields(anthropic)
    assert fields is not None
    assert (fields["provider"], fields["model"], fields["max_tokens"], fields["stream"]) == (
        "anthropic",
        "claude-opus-4-1",
        512,
        False,
    )
    gemini = _post(
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        {"contents": [], "generationConfig": {"temperature": 0.1, "topP": 0.8, "seed": 9}},
    )
    assert llm_fields(gemini) == {
        "provider": "gemini",
        "model": "gemini-2.5-flash",
        "temperature": 0.1,
        "top_p": 0.8,
        "seed": 9,
        "stream": True,
        "max_tokens": None,
    }
    bedrock = _post(
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
        {"messages": [], "inferenceConfig": {"temperature": 0.3, "maxTokens": 99}},
    )
    fields = llm_fields(bedrock)
    assert fields is not None
    assert fields["model"] == "anthropic.claude-3-haiku-20240307-v1:0"
    assert (fields["temperature"], fields["max_tokens"]) == (0.3, 99)
    assert llm_fields(Interaction(Request("GET", "https://example.com/orders/1"))) is None
    assert llm_fields(_post("https://example.com/search", {"query": "x"})) is None


def test_show_reads_azure_bedrock_embeddings_and_string_sampling_as_interaction_llm() -> None:
    """``show``'s llm line is ``Interaction.llm``: the Azure deployment names the model, the
    Bedrock model id is unescaped, embeddings are an OpenAI API, and a string is not a number."""
    azure = _post(
        "https://x.openai.azure.com/openai/deployments/prod-gpt4o/chat/completions?api-version=1",
        {"messages": [], "max_tokens": 10},
    )
    assert llm_fields(azure) == {
        "provider": "openai",
        "model": "prod-gpt4o",
        "temperature": None,
        "top_p": None,
        "seed": None,
        "stream": False,
        "max_tokens": 10,
    }
    invoke = _post(
        "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke-with-response-stream",
        {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "temperature": 0.5},
    )
    shown = (
        'llm provider "bedrock", model "anthropic.claude-3-5-sonnet-20240620-v1:0", '
        "temperature 0.5, stream true, max_tokens 64\n"
    )
    assert shown in detail(0, invoke)
    embeddings = _post(
        "https://api.openai.com/v1/embeddings", {"model": "text-embedding-3-large", "input": "x"}
    )
    assert 'llm provider "openai", model "text-embedding-3-large", stream false\n' in detail(
        0, embeddings
    )
    strings = _post(
        "https://api.anthropic.com/v1/messages",
        {"model": "claude-opus-4-1", "temperature": "0.7", "top_p": "0.9", "max_tokens": 8},
    )
    fields = llm_fields(strings)
    assert fields is not None
    assert (fields["temperature"], fields["top_p"], fields["max_tokens"]) == (None, None, 8)
    assert fields == {name: getattr(strings.llm, name) for name in fields}


def test_decode_body_undoes_content_encodings() -> None:
    data = b'{"a": 1}' * 50
    assert decode_within_budget([("Content-Encoding", "gzip")], gzip.compress(data)).data == data
    assert decode_within_budget([("content-encoding", "deflate")], zlib.compress(data)).data == data
    raw_deflate = zlib.compressobj(wbits=-15)
    body = raw_deflate.compress(data) + raw_deflate.flush()
    assert decode_within_budget([("content-encoding", "deflate")], body).data == data
    chained = gzip.compress(zlib.compress(data))
    assert decode_within_budget([("content-encoding", "deflate, gzip")], chained).data == data
    cut = decode_within_budget([("content-encoding", "gzip")], gzip.compress(data)[:-12])
    assert data.startswith(cut.data) and "incomplete" in cut.note
    unknown = decode_within_budget([("content-encoding", "snappy")], b"xyz")
    assert unknown.data == b"xyz" and "unknown content-encoding" in unknown.note


def test_sse_events_and_joined_text() -> None:
    body = (
        b": keep-alive\r\n\r\n"
        b'event: message_start\r\ndata: {"type": "message_start"}\r\n\r\n'
        b'data: {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi "}}\n\n'
        b'data: {"candidates": [{"content": {"parts": [{"text": "there"}]}}]}\n\n'
        b"id: 7\ndata: line one\ndata: line two\n\n"
        b"data: [DONE]\n\n"
    )
    events = parse_sse(body)
    assert [e.event for e in events] == ["message_start", None, None, None, None]
    assert events[3].id == "7" and events[3].data == "line one\nline two"
    assert sse_text(events) == "Hi there"
    plain = parse_sse(b"data: a\n\ndata: b\n\ndata: [DONE]\n\n")
    assert sse_text(plain) == "a\nb"
    kind, value, _note = readable_body([("Content-Type", "text/event-stream")], body)
    assert kind == "sse" and value[0] == {
        "event": "message_start",
        "data": {"type": "message_start"},
    }
    assert readable_body([], b"\x00\xff")[0] == "binary"
    assert readable_body([], "héllo".encode())[:2] == ("text", "héllo")
