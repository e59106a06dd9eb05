"""``agenttape audit``: credentials found wherever they hide, and the pre-commit hook."""

from __future__ import annotations

import base64
import gzip
import json
import random
import re
import string
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import httpx
import pytest

import agenttape
from agenttape._core import meta
from agenttape._core.models import Failure, Interaction, Request, Response
from agenttape._core.redaction import Redactor
from agenttape._core.wire import codec
from tests.cli_support import (
    cli,
)
from tests.servers import Server, json_reply


def _crafted(path: Path, interactions: list[Interaction]) -> None:
    """A cassette written by another tool or an older version: no redaction ran over it."""
    path.write_bytes(codec.encode(meta.new_header(), interactions))


SECRETS = {
    "openai-key": "sk-proj-" + "a1B2c3D4" * 5,
    "anthropic-key": "sk-ant-api03-" + "Zz9Yy8Xx" * 5,
    "aws-access-key-id": "AKIA" + "ABCDEFGHIJKLMNOP",
    "google-api-key": "AIza" + "S" * 35,
    "github-token": "ghp_" + "q" * 36,
    "slack-token": "xoxb-" + "1234567890-abcdef",
    "bearer-token": "Bearer " + "eyJhbGciOiJIUzI1NiJ9.payload.signature",
    "private-key": "-----BEGIN RSA PRIVATE KEY-----",
}


def test_audit_finds_every_credential_shape_and_exits_1(tmp_path: Path) -> None:
    gz = gzip.compress(json.dumps({"token": SECRETS["github-token"]}).encode())
    interactions = [
        Interaction(
            Request("GET", f"https://example.com/v1/x?key={SECRETS['google-api-key']}&page=1"),
            Response(200, headers=[("X-Amz-Key", SECRETS["aws-access-key-id"])], body=b"{}"),
        ),
        Interaction(
            Request(
                "POST",
                "https://api.example.com/v1/messages",
                headers=[("Authorization", SECRETS["bearer-token"])],
                body=json.dumps(
                    {"k": SECRETS["anthropic-key"], "o": SECRETS["openai-key"]}
                ).encode(),
            ),
            Response(
                200,
                headers=[("Content-Encoding", "gzip"), ("Content-Type", "application/json")],
                body=gz,
            ),
        ),
        Interaction(
            Request("POST", "https://hooks.example.com/", body=SECRETS["slack-token"].encode()),
            Response(200, body=f"{SECRETS['private-key']}\nMIIE...".encode()),
        ),
    ]
    dirty = tmp_path / "cassettes" / "dirty.msgpack"
    dirty.parent.mkdir()
    _crafted(dirty, interactions)
    result = cli("audit", tmp_path / "cassettes")
    assert result.returncode == 1, result
    out = result.stdout
    for kind in SECRETS:
        assert f" {kind} " in out, (kind, out)
    assert "response body (decompressed): github-token ghp_qq" in out
    assert "request header Authorization: bearer-token" in out
    for secret in SECRETS.values():
        assert secret not in out + result.stderr  # masked, never printed whole
    assert "secrets found in 1 cassette" in result.stderr


def test_audit_is_clean_on_recorded_cassettes(session: Path) -> None:
    result = cli("audit", session)
    assert result.returncode == 0, result.stdout
    assert "0 secrets found in 1 cassette" in result.stdout


def test_redact_then_audit_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "old.msgpack"
    _crafted(
        path,
        [
            Interaction(
                Request(
                    "POST",
                    "https://api.example.com/v1?api_key=plain-value",
                    headers=[
                        ("x-api-key", "plain-value"),
                        ("Authorization", SECRETS["bearer-token"]),
                    ],
                    body=json.dumps({"key": SECRETS["openai-key"]}).encode(),
                ),
                Response(200, headers=[("Set-Cookie", "session=abc")], body=b"ok"),
            )
        ],
    )
    found = cli("audit", path)
    assert found.returncode == 1
    assert "unredacted-secret-query" in found.stdout and "unredacted-secret-header" in found.stdout
    assert cli("redact", path).returncode == 0
    assert cli("audit", path).returncode == 0


def test_pre_commit_hook_runs_audit_on_cassettes(tmp_path: Path) -> None:
    import shlex

    import yaml

    hooks = yaml.safe_load((Path(__file__).parent.parent / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "agenttape-audit" and hook["language"] == "python"
    assert re.search(hook["files"], "cassettes/test_x/test_y.msgpack")
    assert not re.search(hook["files"], "src/app.py")
    dirty, clean = tmp_path / "dirty.msgpack", tmp_path / "clean.msgpack"
    _crafted(
        dirty,
        [
            Interaction(
                Request("GET", "https://x.test/"),
                Response(200, body=SECRETS["openai-key"].encode()),
            )
        ],
    )
    _crafted(clean, [Interaction(Request("GET", "https://x.test/"), Response(200, body=b"fine"))])
    entry = shlex.split(hook["entry"])
    assert entry[0] == "agenttape"
    # pre-commit appends the staged file names to the entry
    assert cli(*entry[1:], clean).returncode == 0
    assert cli(*entry[1:], clean, dirty).returncode == 1


# -- every shape in every place, and nothing on a clean corpus ----------------------------

JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJ1Xzc3MTAiLCJhdWQiOiJhcGkifQ"
    ".Q2lnbmF0dXJlLWJ5dGVzLWhlcmUtMDEyMzQ1Njc4OQ"
)
PEM = (
    "-----BEGIN EC PRIVATE KEY-----\n"
    "MHcCAQEEIBkg4LVWM9nuwNSk3yBy5RyHAi7bVXXDKSjZNZ3HcSbUoAoGCCqGSM49\n"
    "AwEHoUQDQgAE4kKZ9Lv8uO2GwbLp5hy1nqSkhOAi0sM+X1eExampleKeyMaterial\n"
    "-----END EC PRIVATE KEY-----\n"
)
SHAPES = {
    "openai-key": "sk-proj-Xq7vR2mN8pL4kJ6hG3fD1sA9zY5wT0uB",
    "anthropic-key": "sk-ant-api03-Rt5Yu8Io2Pa4Sd6Fg9Hj1Kl3Zx7Cv0Bn",
    "aws-access-key-id": "AKIAQ3EGT7NLM4XPZ2RV",
    "google-api-key": "AIzaSyB3k9Q2x7Lm5Np8Rt1Vw4Yz6Ac0Df2Gh4J",
    "github-token": "ghp_R8s2T5u7V9w1X3y5Z7a9B1c3D5e7F9g1H3i5",
    "slack-token": "xoxb-204817493051-6c1d9e7f2a4b",
    "bearer-token": "Bearer Tq9WvX2yZ4aB6cD8eF0gH2iJ4kL6",
    "jwt": JWT,
    "private-key": PEM,
}
PLACES = [  # where audit reports each interaction's secret (more follows: which query value)
    "request url",
    "request header",
    "request body",
    "request body",
    "request body (decompressed)",
    "response header",
    "response body",
    "response body (decompressed)",
    "error message",
    "tags and metadata",
]


def leaked(secret: str) -> tuple[dict[str, Any], list[Interaction]]:
    """A cassette holding ``secret`` once in each of PLACES, each place its own
    interaction (the last two: interaction 8 and the header)."""
    line = secret.replace("\n", " ")  # a header value is one line
    document = json.dumps({"note": secret}).encode()
    form = f"user=ann&note={quote_plus(secret)}".encode()
    plain, encoded = [("Content-Type", "application/json")], [("Content-Encoding", "gzip")]
    base = "https://api.example.com/v1"
    interactions = [
        Interaction(Request("GET", f"{base}?q={quote(secret, safe='')}"), Response(200)),
        Interaction(Request("GET", base, [("X-Note", line)]), Response(200)),
        Interaction(Request("POST", base, plain, document), Response(200)),
        Interaction(
            Request("POST", base, [("Content-Type", "application/x-www-form-urlencoded")], form),
            Response(200),
        ),
        Interaction(Request("POST", base, encoded, gzip.compress(document)), Response(200)),
        Interaction(Request("GET", base), Response(200, headers=[("X-Note", line)])),
        Interaction(Request("GET", base), Response(200, headers=plain, body=document)),
        Interaction(
            Request("GET", base), Response(200, headers=encoded, body=gzip.compress(document))
        ),
        Interaction(Request("GET", base), error=Failure("read_error", "OSError", f"as {secret}")),
    ]
    header = {**meta.new_header(), "tags": {"note": secret}}
    return header, interactions


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_audit_finds_each_shape_in_each_place(kind: str, tmp_path: Path) -> None:
    header, interactions = leaked(SHAPES[kind])
    path = tmp_path / "leaked.msgpack"
    path.write_bytes(codec.encode(header, interactions))
    result = cli("audit", path)
    assert result.returncode == 1, result
    for index, place in enumerate(PLACES):
        where = "header: tags" if place.startswith("tags") else f"interaction {index}: {place}"
        lines = [line for line in result.stdout.splitlines() if f": {where}" in line]
        assert any(f" {kind} " in line for line in lines), (place, result.stdout)


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_default_redaction_removes_each_shape_from_each_place_it_touches(kind: str) -> None:
    """What audit finds in a request (URL, headers, plain, form and gzip bodies) and in
    response headers, recording never stores."""
    secret = SHAPES[kind]
    redactor = Redactor()
    evidence = [part for part in re.split(r"[\s-]+", secret) if len(part) >= 10][-1]
    _header, interactions = leaked(secret)
    for interaction in interactions[:5]:
        request = redactor.request(interaction.request)
        body = request.body
        if request.header("content-encoding") == "gzip":
            body = gzip.decompress(body)
        stored = (request.url + repr(request.headers)).encode() + body
        assert evidence.encode() not in stored and quote(evidence).encode() not in stored
    response = interactions[5].response
    assert response is not None
    assert evidence not in repr(redactor.response_headers(response.headers))


POD_WORDS = ["flask-api", "task-runner", "desk-booking", "kiosk-ui", "risk-engine", "disk-gc"]


def clean_corpus() -> list[tuple[str, str, dict[str, Any]]]:
    """What a realistic agent's traffic holds and no credential: Kubernetes pod names,
    UUIDs, git SHAs, base64 images, model names, request and completion ids."""
    chance = random.Random(20)
    alnum = string.ascii_lowercase + string.digits

    def pod(word: str) -> str:
        replica = "".join(chance.choices("0123456789abcdef", k=9))
        return f"{word}-deployment-{replica}-{''.join(chance.choices(alnum, k=5))}"

    image = base64.b64encode(chance.randbytes(48_000)).decode()
    calls = []
    for number in range(24):
        pods = [pod(word) for word in POD_WORDS]
        document = {
            "model": chance.choice(["gpt-4o-mini", "claude-sonnet-4-5", "o3-mini-2025-01-31"]),
            "id": f"chatcmpl-{''.join(chance.choices(string.ascii_letters + string.digits, k=29))}",
            "request_id": f"req_{''.join(chance.choices(alnum, k=24))}",
            "trace": str(uuid.UUID(int=chance.getrandbits(128))),
            "commit": f"{chance.getrandbits(160):040x}",
            "pods": pods,
            "messages": [
                {"role": "user", "content": f"why is {pods[0]} crash-looping on task-queue?"},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:image/png;base64,{image}"},
                        }
                    ],
                },
            ],
        }
        query = f"pod={pods[1]}&since=2025-01-0{number % 9 + 1}&sha={document['commit'][:12]}"
        calls.append((f"/v1/pods/{pods[2]}/logs", query, document))
    return calls


def test_a_realistic_clean_corpus_is_neither_flagged_nor_rewritten(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply(seen.json(), headers=[("x-request-id", "req_1")]))
    path = tmp_path / "clean.msgpack"
    corpus = clean_corpus()
    with agenttape.use_cassette(path, mode="once"), httpx.Client() as client:
        for where, query, document in corpus:
            client.post(f"{server.url}{where}?{query}", json=document, headers={"x-pod": where})
    result = cli("audit", path)
    assert result.returncode == 0, result.stdout
    assert "0 secrets found in 1 cassette" in result.stdout
    stored = agenttape.load(path).interactions
    assert len(stored) == len(corpus)
    for interaction, seen in zip(stored, server.seen, strict=True):
        assert interaction.request.body == seen.body  # redaction left every byte
        assert interaction.request.url.endswith(f"{seen.path}?{urlencode(seen.query)}")
        assert interaction.request.header("x-pod") == seen.header("x-pod")


def test_audit_finds_a_percent_encoded_bearer_token_in_a_query(tmp_path: Path) -> None:
    path = tmp_path / "query.msgpack"
    url = "https://search.example.com/v1?q=Bearer%20" + JWT.split(".")[0] + "&page=2"
    _crafted(path, [Interaction(Request("GET", url), Response(200))])
    result = cli("audit", path)
    assert result.returncode == 1, result
    assert "interaction 0: request url query q (decoded): bearer-token Bearer" in result.stdout


def test_a_key_across_the_pieces_of_a_large_compressed_body_is_found_once(tmp_path: Path) -> None:
    """Compressed bodies are scanned piece by piece: a credential where one piece ends and
    the next begins is found whole, and once."""
    key = SHAPES["openai-key"]
    for at in ((1 << 20) - 10, (1 << 20) + (1 << 16) - 7, 3 << 20):
        text = b"x" * at + f" {key} ".encode() + b"y" * (1 << 20)
        path = tmp_path / f"large-{at}.msgpack"
        _crafted(
            path,
            [
                Interaction(
                    Request("GET", "https://x.test/"),
                    Response(200, headers=[("Content-Encoding", "gzip")], body=gzip.compress(text)),
                )
            ],
        )
        result = cli("audit", path)
        assert result.stdout.count("openai-key sk-pro…T0uB (40 chars)") == 1, (at, result.stdout)
