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


def test_order_lookup_example_replays_offline_without_a_key() -> None:
    cassette = ROOT / "examples" / "order_lookup" / "cassettes" / "wrong_order.msgpack"
    before = cassette.read_bytes()
    result = run_example("examples/order_lookup/run.py")
    assert result.returncode == 0, result.stderr
    assert "replayed agent answered: Here is what I found: order id 1042, user id u_bob" in (
        result.stdout
    )
    assert "fixed agent answers:     Your kettle order 1017 is delivered" in result.stdout
    assert cassette.read_bytes() == before
    assert not cassette.with_name("wrong_order.derived.msgpack").exists()


def test_rate_limit_example_replays_offline_without_a_key() -> None:
    cassettes = ROOT / "examples" / "rate_limit" / "cassettes"
    before = {path.name: path.read_bytes() for path in cassettes.iterdir()}
    result = run_example("examples/rate_limit/run.py", "--times", "4")
    assert result.returncode == 0, result.stderr
    wrong = "shipped parser: Here is what I found: sku KTL-100, price EUR 120.00."
    assert result.stdout.count(wrong) == 4
    assert "fixed parser:   I can't get the price of KTL-100 right now" in result.stdout
    assert "retry-after: 30" in result.stdout
    assert "served 429 -> 200 in" in result.stdout
    assert {path.name: path.read_bytes() for path in cassettes.iterdir()} == before


def test_realtime_example_replays_offline_without_a_key() -> None:
    cassette = ROOT / "cassettes" / "realtime.msgpack"
    before = cassette.read_bytes()
    result = run_example("examples/realtime/run.py")
    assert result.returncode == 0, result.stderr
    assert "assistant:  Your kettle order 1017 ships today and arrives on Thursday." in (
        result.stdout
    )
    assert "audio:      28800 bytes of PCM16 (24 kHz mono)" in result.stdout
    assert "events:     23 from the server" in result.stdout
    assert "4 client frames checked, 24 server frames sent" in result.stdout
    assert cassette.read_bytes() == before
