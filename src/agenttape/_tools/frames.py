"""WebSocket frames as the commands show them: one readable line per frame, counts per
direction, Chrome's ``_webSocketMessages`` for HAR, JSON for export, and a frame-by-frame
difference of two sessions."""

from __future__ import annotations

import base64
import json
from typing import Any

from .._core import jsonpath
from .._core.matching.matcher import json_differences, show_value
from .._core.models import OPCODE_NUMBERS, Frame, Interaction
from .._core.wire.websocket import parse_close
from .reading import parse_json

ARROWS = {"client": "->", "server": "<-"}


def counts(interaction: Interaction) -> dict[str, int]:
    """Frames sent by each side."""
    frames = interaction.frames or []
    sent = sum(1 for frame in frames if frame.direction == "client")
    return {"client": sent, "server": len(frames) - sent}


def ending(interaction: Interaction) -> str:
    """How the session ended, in words."""
    closed = interaction.closed
    if closed is not None:
        reason = f" {closed.reason!r}" if closed.reason else ""
        return f"closed by the {closed.by} with {closed.code}{reason}"
    if interaction.error is not None:
        error = interaction.error
        return f"failed: {error.kind} ({error.type}: {error.message})"
    return "cut: still open when the recording stopped, or past the recorder's size limit"


def readable_frame(frame: Frame, limit: int = 200) -> str:
    """A frame's payload for reading: JSON compact, text as is, a close frame's code and
    reason, binary as its size and first bytes in hex."""
    payload = frame.payload
    if frame.opcode == "close":
        code, reason = parse_close(payload)
        return "no code" if code is None else f"{code}{' ' + repr(reason) if reason else ''}"
    if frame.opcode in ("text", "continuation"):
        is_json, document = parse_json(payload)
        if is_json:
            text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        else:
            text = payload.decode("utf-8", "replace")
        return text if len(text) <= limit else text[: limit - 1] + "…"
    head = payload[:24].hex(" ")
    return f"{len(payload)} bytes {head}{' …' if len(payload) > 24 else ''}"


def lines(interaction: Interaction) -> list[str]:
    """``agenttape show -i N``: the frames, numbered as a replay miss numbers them."""
    if interaction.frames is None:
        return []
    count = counts(interaction)
    out = [
        f"WebSocket frames ({count['client']} sent by the client, {count['server']} by the "
        f"server; {ending(interaction)})"
    ]
    for number, frame in enumerate(interaction.frames):
        fin = "" if frame.fin else " (more follows)"
        out.append(
            f"  [{number}] {frame.offset * 1000:9.1f} ms {ARROWS[frame.direction]} "
            f"{frame.opcode}{fin} {readable_frame(frame)}"
        )
    return out


def _data(frame: Frame) -> tuple[str, bool]:
    """A payload as text when it is UTF-8, else base64: (data, whether base64)."""
    if frame.opcode in ("text", "continuation", "close"):
        try:
            return frame.payload.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    return base64.b64encode(frame.payload).decode("ascii"), True


def as_json(interaction: Interaction) -> dict[str, Any] | None:
    """The session for ``export --format json`` and ``show --json``: every frame lossless."""
    if interaction.frames is None:
        return None
    frames = []
    for frame in interaction.frames:
        data, encoded = _data(frame)
        item: dict[str, Any] = {
            "direction": frame.direction,
            "opcode": frame.opcode,
            "offset": frame.offset,
            "size": len(frame.payload),
            "base64" if encoded else "text": data,
        }
        if not frame.fin:
            item["fin"] = False
        frames.append(item)
    closed = interaction.closed
    return {
        "counts": counts(interaction),
        "frames": frames,
        "closed": None
        if closed is None
        else {"code": closed.code, "reason": closed.reason, "by": closed.by},
        "ending": ending(interaction),
    }


def har_messages(interaction: Interaction) -> list[dict[str, Any]]:
    """Chrome's ``_webSocketMessages``: type ``send``/``receive``, ``time`` in Unix
    seconds, ``opcode`` as on the wire, ``data`` as text (base64 for binary payloads)."""
    messages = []
    for frame in interaction.frames or ():
        data, _encoded = _data(frame)
        messages.append(
            {
                "type": "send" if frame.direction == "client" else "receive",
                "time": interaction.started_at + frame.offset,
                "opcode": OPCODE_NUMBERS[frame.opcode],
                "data": data,
            }
        )
    return messages


def differences(a: Interaction, b: Interaction, ignore: tuple[str, ...]) -> list[str]:
    """Frame by frame: direction, opcode and payload (JSON by field, ``ignore`` left out),
    then how each session ended."""
    left, right = a.frames or [], b.frames or []
    out: list[str] = []
    if (a.frames is None) != (b.frames is None):
        return ["websocket: only one of the two is a WebSocket session"]
    for number in range(max(len(left), len(right))):
        if len(out) >= 8:
            out.append("websocket: more frames differ")
            break
        where = f"frame {number}"
        if number >= len(right):
            out.append(f"{where}: expected {_label(left[number])}, missing")
            continue
        if number >= len(left):
            out.append(f"{where}: not recorded, got {_label(right[number])}")
            continue
        want, got = left[number], right[number]
        if (want.direction, want.opcode) != (got.direction, got.opcode):
            out.append(f"{where}: expected {_label(want)}, got {_label(got)}")
        elif want.payload != got.payload:
            out += _payload_differences(where, want, got, ignore)
    if ending(a) != ending(b):
        out.append(f"websocket end: expected {ending(a)}, got {ending(b)}")
    return out


def _label(frame: Frame) -> str:
    return f"{frame.direction} {frame.opcode} {show_value(readable_frame(frame, 60))}"


def _payload_differences(where: str, want: Frame, got: Frame, ignore: tuple[str, ...]) -> list[str]:
    (want_json, want_doc), (got_json, got_doc) = parse_json(want.payload), parse_json(got.payload)
    if want_json and got_json:
        for path in ignore:
            jsonpath.delete(want_doc, path)
            jsonpath.delete(got_doc, path)
        found: list[str] = []
        json_differences(f"{where} body", want_doc, got_doc, found)
        return found
    return [f"{where}: expected {_label(want)}, got {_label(got)}"]
