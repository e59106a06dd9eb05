"""``agenttape audit``: credentials found wherever they hide, and the pre-commit hook."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from agenttape._core import codec, meta
from agenttape._core.models import Interaction, Request, Response
from tests.cli_support import (
    cli,
)


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
