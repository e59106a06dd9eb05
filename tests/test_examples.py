"""The shipped examples run offline from their shipped cassettes, as README says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    environment.pop("OPENAI_BASE_URL", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_support_bot_demo_replays_offline_without_a_key() -> None:
    before = (ROOT / "cassettes" / "support_bot.msgpack").read_bytes()
    result = run_example("examples/support_bot.py")
    assert result.returncode == 0, result.stderr
    assert "sentiment: negative" in result.stdout
    assert "I've arranged a replacement" in result.stdout
    assert "Replayed 2 of 2 recorded interactions" in result.stdout
    assert (ROOT / "cassettes" / "support_bot.msgpack").read_bytes() == before
