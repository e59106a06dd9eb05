"""The shipped examples run offline from their shipped cassettes, as README says."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import run_captured

ROOT = Path(__file__).resolve().parent.parent


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    environment.pop("OPENAI_BASE_URL", None)
    return run_captured([sys.executable, *args], cwd=ROOT, env=environment, timeout=120)


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


def readme_line(start: str) -> str:
    """The one line of README.md's shell blocks that begins with ``start``, as written."""
    found = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith(start)
    ]
    assert len(found) == 1, (start, found)
    return found[0]


def fresh_clone(target: Path) -> Path:
    """The repository as a newcomer's ``git clone`` has it: a clone, with the work tree's
    tracked and new files on top (so the test sees uncommitted changes too)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True, timeout=120)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
        elif not source.exists():
            (target / name).unlink(missing_ok=True)
    return target


def as_written(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for name in ("OPENAI_BASE_URL", "VIRTUAL_ENV", "PYTHONPATH", "NODE_PATH"):
        environment.pop(name, None)
    return run_captured(["bash", "-c", line], cwd=cwd, env=environment, timeout=600)


def untracked(clone: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def test_the_readme_install_demo_and_node_lines_work_as_written_on_a_fresh_clone(
    tmp_path: Path,
) -> None:
    clone = fresh_clone(tmp_path / "agenttape")
    before = untracked(clone)

    install = as_written(readme_line("python3 -m venv .venv && .venv/bin/pip install -q . "), clone)
    assert install.returncode == 0, install.stderr
    imported = as_written(  # from elsewhere, so the checkout's folder is not on the path
        f"{clone}/.venv/bin/python -c 'import agenttape, msgpack; print(agenttape.__file__)'",
        tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    assert "site-packages" in imported.stdout  # installed, not read from the checkout

    demo = as_written(readme_line("python3 -m venv .venv && .venv/bin/pip install -q -e . "), clone)
    assert demo.returncode == 0, demo.stderr
    assert "Replayed 2 of 2 recorded interactions" in demo.stdout

    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are not installed: the README's Node line is not run")
    node = as_written(readme_line("npm ci --prefix examples/node_agent "), clone)
    assert node.returncode == 0, node.stderr
    assert node.stdout.endswith(
        'tool lookup_order(A-1042) -> {"status":"shipped","carrier":"DHL","eta":"2026-11-27"}\n'
        "answer: Here is what I found: status shipped, carrier DHL, eta 2026-11-27.\n"
        "(11 streamed pieces)\n"
    )
    assert untracked(clone) == before  # no lock file or cassette left behind


def test_ci_runs_the_readme_test_command() -> None:
    command = readme_line("python3 -m venv .venv && .venv/bin/pip install -q uv && ")
    setup, separator, tests = command.rpartition(" && ")
    assert separator and tests == ".venv/bin/python -m pytest -n 2"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert setup in ci and tests in ci


def test_market_data_tool_replays_offline_through_curl_cffi() -> None:
    pytest.importorskip("curl_cffi")
    cassette = ROOT / "examples" / "market_data" / "cassettes" / "quotes.msgpack"
    before = cassette.read_bytes()
    result = run_example("examples/market_data/run.py")
    assert result.returncode == 0, result.stderr
    assert "ACME: 103.40 USD (+3.61% on the day)" in result.stdout
    assert "INITECH: No data found for INITECH" in result.stdout
    assert "Replayed 3 of 3 recorded interactions" in result.stdout
    assert cassette.read_bytes() == before
    # Recorded through the real client: the browser it impersonated is on each request.
    import agenttape

    requests = [i.request for i in agenttape.load(cassette).interactions]
    assert all(r.header("curl_cffi-impersonate") for r in requests)
