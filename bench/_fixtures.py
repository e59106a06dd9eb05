"""Deterministic request and response bodies, and the app the bench server answers with."""

from __future__ import annotations

import json
import random
from functools import cache

from tests.servers import Reply, Seen, sse_reply

WORDS = [
    "order",
    "shipment",
    "refund",
    "invoice",
    "customer",
    "account",
    "delivery",
    "package",
    "tracking",
    "support",
    "warehouse",
    "carrier",
    "address",
    "payment",
    "receipt",
    "replacement",
    "discount",
    "subscription",
]
SYSTEM_PROMPT = (
    "You are a careful support agent for an online shop. Answer in two sentences, cite the "
    "order number, never promise a refund the policy does not allow. "
) * 8


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


@cache
def item_body(i: int, size: int = 2048) -> bytes:
    """A JSON document of about ``size`` bytes, with floats that must survive byte-exact."""
    rng = random.Random(i)
    document = {
        "id": i,
        "sku": f"SKU-{i:06d}",
        "price": round(rng.uniform(1, 500), 2),
        "score": rng.random(),
        "tags": [rng.choice(WORDS) for _ in range(6)],
        "stock": {"warehouse": rng.randrange(1000), "reserved": rng.randrange(50)},
        "description": "",
    }
    room = size - len(json.dumps(document))
    document["description"] = _text(rng, max(room, 0))
    return json.dumps(document).encode()


def item_path(i: int) -> str:
    return f"/items/{i}?page={i % 7}&sort=name"


def small_path(i: int) -> str:
    return f"/small/{i}?page={i % 7}"


@cache
def chat_request(i: int, size: int = 4096) -> bytes:
    """A chat-completions request body of about ``size`` bytes; ``user`` names the reply."""
    rng = random.Random(10_000 + i)
    document = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Ticket {i}: " + _text(rng, 600)},
            {"role": "assistant", "content": _text(rng, 400)},
            {"role": "user", "content": ""},
        ],
        "temperature": 0.2,
        "user": f"user-{i}",
    }
    room = size - len(json.dumps(document))
    document["messages"][3]["content"] = _text(rng, max(room, 0))  # type: ignore[index]
    return json.dumps(document).encode()


@cache
def chat_reply(i: int, model: str = "gpt-4o-mini") -> bytes:
    rng = random.Random(20_000 + i)
    return json.dumps(
        {
            "id": f"chatcmpl-{i:08d}",
            "object": "chat.completion",
            "created": 1_763_750_000 + i,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": _text(rng, 400)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 900, "completion_tokens": 90, "total_tokens": 990},
        }
    ).encode()


SSE_EVENTS = [
    f'data: {{"choices":[{{"delta":{{"content":"part {n} "}}}}]}}\n\n'.encode() for n in range(4)
] + [b"data: [DONE]\n\n"]
SSE_PAUSE = 0.2
BIG_BODY_SIZE = 20 * 1024 * 1024


def _json(body: bytes, i: int) -> Reply:
    return Reply(
        headers=[("Content-Type", "application/json"), ("X-Request-Id", f"req_{i:06d}")],
        chunks=[body],
    )


@cache
def s3_object(i: int, size: int = 4096) -> bytes:
    """An S3 object's bytes: not text, so any decoding or re-encoding shows."""
    return random.Random(30_000 + i).randbytes(size)


@cache
def dynamodb_item(i: int) -> dict[str, dict[str, str]]:
    rng = random.Random(40_000 + i)
    return {
        "id": {"S": f"item-{i}"},
        "name": {"S": _text(rng, 60)},
        "price": {"N": f"{rng.uniform(1, 500):.2f}"},
        "note": {"S": _text(rng, 400)},
    }


def _aws(seen: Seen) -> Reply | None:
    """The two AWS calls of the botocore scenario: S3 GetObject and DynamoDB GetItem."""
    if seen.method == "GET" and seen.path.startswith("/bench-bucket/obj-"):
        i = int(seen.path.rsplit("-", 1)[1])
        return Reply(
            headers=[
                ("Content-Type", "application/octet-stream"),
                ("ETag", f'"{i:032x}"'),
                ("x-amz-request-id", f"REQ{i:013d}"),
            ],
            chunks=[s3_object(i)],
        )
    if seen.header("x-amz-target") == "DynamoDB_20120810.GetItem":
        i = int(seen.json()["Key"]["id"]["S"].split("-")[1])
        body = json.dumps({"Item": dynamodb_item(i)}).encode()
        return Reply(
            headers=[
                ("Content-Type", "application/x-amz-json-1.0"),
                ("x-amzn-RequestId", f"REQ{i:013d}"),
            ],
            chunks=[body],
        )
    return None


def app(seen: Seen) -> Reply:
    aws = _aws(seen)
    if aws is not None:
        return aws
    parts = seen.path.strip("/").split("/")
    if parts[0] == "items":
        return _json(item_body(int(parts[1])), int(parts[1]))
    if parts[0] == "small":
        return _json(item_body(int(parts[1]), 256), int(parts[1]))
    if parts[0] == "big":
        return _json(random.Random(int(parts[1])).randbytes(BIG_BODY_SIZE), int(parts[1]))
    if parts[0] == "stream":
        return sse_reply(SSE_EVENTS, delay=SSE_PAUSE)
    if seen.path == "/v1/chat/completions":
        document = seen.json()
        i = int(document["user"].split("-")[1])
        return _json(chat_reply(i, document["model"]), i)
    return Reply(status=404, chunks=[b"not found"])
