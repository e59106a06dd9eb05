"""The openai SDK's WebSocket clients, unchanged: the Realtime API (``client.realtime.connect``,
sync and async) and the Responses API's WebSocket mode (``client.responses.connect``),
recorded against a local stand-in, replayed with it stopped and no API key."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from realtime_standin import RealtimeStandIn

import agenttape

QUESTION = "Where is my kettle?"
SESSION = {"type": "realtime", "output_modalities": ["audio"], "instructions": "Be brief."}


@pytest.fixture
def realtime() -> Iterator[RealtimeStandIn]:
    with RealtimeStandIn() as api:
        yield api


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_WEBSOCKET_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def converse(client: openai.OpenAI, session: dict[str, Any] = SESSION) -> list[bytes]:
    """One spoken exchange; every server event as the raw message that carried it."""
    raw: list[bytes] = []
    with client.realtime.connect(model="gpt-realtime") as connection:
        connection.session.update(session=session)  # type: ignore[arg-type]
        connection.conversation.item.create(item=item(QUESTION))  # type: ignore[arg-type]
        connection.response.create()
        while not raw or json.loads(raw[-1])["type"] != "response.done":
            message = connection.recv_bytes()
            connection.parse_event(message)  # the SDK's own model of each event
            raw.append(message)
    return raw


async def converse_async(client: openai.AsyncOpenAI) -> list[bytes]:
    raw: list[bytes] = []
    async with client.realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(session=SESSION)  # type: ignore[arg-type]
        await connection.conversation.item.create(item=item(QUESTION))  # type: ignore[arg-type]
        await connection.response.create()
        async for event in connection:
            raw.append(event.to_json(indent=None).encode())
            if event.type == "response.done":
                break
    return raw


def types(raw: list[bytes]) -> list[str]:
    return [json.loads(message)["type"] for message in raw]


def server_frames(path: Path) -> list[bytes]:
    [interaction] = agenttape.load(path).interactions
    assert interaction.frames is not None
    return [f.payload for f in interaction.frames if f.direction == "server" and f.opcode == "text"]


def client_events(path: Path) -> list[str]:
    [interaction] = agenttape.load(path).interactions
    assert interaction.frames is not None
    return [
        json.loads(f.payload)["type"]
        for f in interaction.frames
        if f.direction == "client" and f.opcode == "text"
    ]


def test_realtime_sync_session_replays_the_same_events_offline(
    realtime: RealtimeStandIn, cassette_path: Path, no_key: None
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = converse(openai.OpenAI(api_key="sk-standin", base_url=realtime.base_url))
    realtime.stop()
    kinds = types(live)
    assert kinds[:4] == [
        "session.created",
        "session.updated",
        "conversation.item.created",
        "response.created",
    ]
    assert kinds[-1] == "response.done"
    assert {"response.output_audio_transcript.delta", "response.output_audio.delta"} <= set(kinds)
    assert server_frames(cassette_path) == live  # the raw frames, byte for byte
    assert client_events(cassette_path) == [
        "session.update",
        "conversation.item.create",
        "response.create",
    ]

    with agenttape.use_cassette(cassette_path) as tape:
        replayed = converse(openai.OpenAI(base_url=realtime.base_url))
    assert replayed == live
    assert tape.all_played


def test_realtime_async_session_replays_through_websocket_base_url(
    realtime: RealtimeStandIn, cassette_path: Path, no_key: None
) -> None:
    def client() -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key="sk-standin",
            base_url="http://127.0.0.1:9/v1",  # nothing listens: only the WebSocket is used
            websocket_base_url=realtime.websocket_base_url,
        )

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(converse_async(client()))
    realtime.stop()
    assert types(live)[-1] == "response.done"
    assert [json.loads(m) for m in server_frames(cassette_path)] == [json.loads(m) for m in live]
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = asyncio.run(converse_async(client()))
    assert replayed == live
    assert tape.all_played


def test_a_changed_realtime_event_raises_with_the_field(
    realtime: RealtimeStandIn, cassette_path: Path, no_key: None
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        converse(openai.OpenAI(api_key="sk-standin", base_url=realtime.base_url))
    realtime.stop()
    changed = {**SESSION, "instructions": "Be verbose."}
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        converse(openai.OpenAI(base_url=realtime.base_url), changed)
    # The SDK sends session.update as soon as the socket opens, before or after
    # session.created arrives: the frame's position in the recording varies, not its field.
    difference = "body.session.instructions: expected 'Be brief.', got 'Be verbose.'"
    assert re.search(rf"\nframe [01] {re.escape(difference)}\n", str(caught.value))


def noted(event: Any, seen: list[tuple[str, str]]) -> str | None:
    """Notes a Responses event (and the answer once it completed); the response's id then."""
    seen.append((event.type, getattr(event, "delta", "")))
    if event.type != "response.completed":
        return None
    seen.append((event.response.id, event.response.output_text))
    return str(event.response.id)


def respond_twice(client: openai.OpenAI) -> list[tuple[str, str]]:
    """Two responses on one Responses WebSocket, the second continuing the first."""
    seen: list[tuple[str, str]] = []
    previous: str | None = None
    with client.responses.connect() as connection:
        for question in (QUESTION, "Does it ship today?"):
            extra = {"previous_response_id": previous} if previous else {}
            connection.response.create(model="gpt-5", input=question, **extra)  # type: ignore[arg-type]
            for event in connection:
                completed = noted(event, seen)
                if completed is not None:
                    previous = completed
                    break
    return seen


def test_responses_websocket_mode_replays_several_responses_on_one_socket(
    realtime: RealtimeStandIn, cassette_path: Path, no_key: None
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = respond_twice(openai.OpenAI(api_key="sk-standin", base_url=realtime.base_url))
    realtime.stop()
    assert [kind for kind, _ in live].count("response.created") == 2
    assert live[-1] == ("resp_2", "Following up on resp_1: yes, the kettle ships today.")
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.request.url.endswith("/v1/responses")
    assert interaction.frames is not None
    creates = [
        json.loads(f.payload)
        for f in interaction.frames
        if f.direction == "client" and f.opcode == "text"
    ]
    assert [c.get("previous_response_id") for c in creates] == [None, "resp_1"]

    with agenttape.use_cassette(cassette_path) as tape:
        replayed = respond_twice(openai.OpenAI(base_url=realtime.base_url))
    assert replayed == live
    assert tape.all_played


async def respond_twice_async(client: openai.AsyncOpenAI) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    previous: str | None = None
    async with client.responses.connect() as connection:
        for question in (QUESTION, "Does it ship today?"):
            extra = {"previous_response_id": previous} if previous else {}
            await connection.response.create(model="gpt-5", input=question, **extra)  # type: ignore[arg-type]
            async for event in connection:
                completed = noted(event, seen)
                if completed is not None:
                    previous = completed
                    break
    return seen


def test_responses_websocket_mode_replays_through_the_async_client(
    realtime: RealtimeStandIn, cassette_path: Path, no_key: None
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(
            respond_twice_async(
                openai.AsyncOpenAI(api_key="sk-standin", base_url=realtime.base_url)
            )
        )
    realtime.stop()
    assert live[-1] == ("resp_2", "Following up on resp_1: yes, the kettle ships today.")
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = asyncio.run(respond_twice_async(openai.AsyncOpenAI(base_url=realtime.base_url)))
    assert replayed == live
    assert tape.all_played
