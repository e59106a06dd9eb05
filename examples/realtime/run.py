"""One short voice exchange on OpenAI's Realtime API, replayed offline from a shipped cassette.

    python examples/realtime/run.py              # replay cassettes/realtime.msgpack, offline
    python examples/realtime/run.py --standin    # record afresh from the local stand-in
    python examples/realtime/run.py --record     # record afresh from OpenAI (needs OPENAI_API_KEY)

``converse`` is plain openai SDK code (``client.realtime.connect``) and knows nothing about
agenttape: the WebSocket session, every event both ways, is what the cassette holds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import openai

import agenttape

ROOT = Path(__file__).resolve().parents[2]
CASSETTE = ROOT / "cassettes" / "realtime.msgpack"
MODEL = "gpt-realtime"
QUESTION = "Where is my kettle order?"
# Recorded from a stand-in on a random local port: replay matches the upgrade on its path, so
# the session is served whatever host the SDK is pointed at.
MATCH_ON = ("method", "path")


@dataclass(slots=True)
class Reply:
    events: list[str] = field(default_factory=list)
    transcript: str = ""
    audio: bytes = b""


async def converse(client: openai.AsyncOpenAI, question: str) -> Reply:
    """Ask one question by voice session; collect the spoken answer's transcript and audio."""
    reply = Reply()
    async with client.realtime.connect(model=MODEL) as connection:
        await connection.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "instructions": "Be brief.",
            }
        )
        await connection.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": question}],
            }
        )
        await connection.response.create()
        async for event in connection:
            reply.events.append(event.type)
            if event.type == "response.output_audio_transcript.delta":
                reply.transcript += event.delta
            elif event.type == "response.output_audio.delta":
                reply.audio += base64.b64decode(event.delta)
            elif event.type == "response.done":
                break
    return reply


def show(reply: Reply) -> None:
    print(f"you:        {QUESTION}")
    print(f"assistant:  {reply.transcript}")
    print(f"audio:      {len(reply.audio)} bytes of PCM16 (24 kHz mono)")
    print(f"events:     {len(reply.events)} from the server")


def record(standin: bool) -> None:
    if standin:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from realtime_standin import RealtimeStandIn

        api = RealtimeStandIn()
        os.environ["OPENAI_BASE_URL"] = api.base_url
        os.environ.setdefault("OPENAI_API_KEY", "sk-standin-placeholder")
    elif not os.environ.get("OPENAI_API_KEY"):
        sys.exit("--record talks to OpenAI and needs OPENAI_API_KEY (or use --standin)")
    with agenttape.use_cassette(CASSETTE, mode="all", match_on=MATCH_ON):
        reply = asyncio.run(converse(openai.AsyncOpenAI(), QUESTION))
    if standin:
        api.stop()
    print(f"recorded {CASSETTE.relative_to(ROOT)}")
    show(reply)


def replay() -> None:
    with agenttape.use_cassette(CASSETTE, match_on=MATCH_ON) as tape:
        reply = asyncio.run(converse(openai.AsyncOpenAI(), QUESTION))
    show(reply)
    [session] = tape.interactions
    frames = session.frames or []
    sent = sum(frame.direction == "client" for frame in frames)
    print()
    print(
        f"Replayed 1 WebSocket session from {CASSETTE.relative_to(ROOT)}, offline, with no API "
        f"key: {sent} client frames checked, {len(frames) - sent} server frames sent."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay (default) or record the voice exchange.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--record", action="store_true", help="record from OpenAI")
    group.add_argument("--standin", action="store_true", help="record from the local stand-in")
    args = parser.parse_args()
    if args.record or args.standin:
        record(standin=args.standin)
    else:
        replay()


if __name__ == "__main__":
    main()
