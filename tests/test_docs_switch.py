"""The switch from pytest-recording as docs/pytest-recording.md tells it, run step by step on a
fresh project: its own virtual environment, a ``@pytest.mark.vcr`` suite whose YAML cassette
pytest-recording recorded, then the doc's commands, then ``pytest`` with the server stopped."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.servers import Seen, Server, json_reply

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "pytest-recording.md"

SUITE = """
import os

import httpx
import pytest
import requests

API = os.environ["API"]


@pytest.mark.vcr
def test_order():
    assert httpx.get(API + "/orders/A-1").json() == {"order": "A-1", "status": "shipped"}


@pytest.mark.vcr
def test_refund(vcr):
    answer = requests.post(API + "/refunds", json={"order": "A-1"})
    assert answer.json() == {"order": "A-1", "status": "refunded"}
    assert vcr.play_count in (0, 1)
"""


def app(seen: Seen) -> object:
    if seen.path == "/refunds":
        return json_reply({"order": seen.json()["order"], "status": "refunded"})
    return json_reply({"order": "A-1", "status": "shipped"})


def documented_steps() -> list[list[str]]:
    """The commands of the doc's first code block, one a line, comments left out."""
    text = DOC.read_text()
    block = re.search(r"## What a switch costs\n.*?```bash\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/pytest-recording.md: no switch block"
    lines = (line.split("#", 1)[0].strip() for line in block.group(1).splitlines())
    return [shlex.split(line) for line in lines if line]


def uv() -> str:
    found = shutil.which(
        "uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    if found is None:
        pytest.skip("uv is not installed (README's test command installs it)")
    return found


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_documented_switch_on_a_fresh_project(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    installer = uv()
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_shop.py").write_text(SUITE)
    python = str(project / ".venv" / "bin" / "python")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTTAPE_", "PYTEST_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["AGENTTAPE_CACHE_DIR"] = str(tmp_path / "cache")
    server = serve(app)
    env["API"] = server.url

    # The project as it was: pytest-recording records its cassettes.
    run([installer, "venv", "-q", "--python", sys.executable, ".venv"], project, env)
    before = ["pytest", "pytest-recording", "vcrpy", "httpx", "requests"]
    run([installer, "pip", "install", "-q", "--python", python, *before], project, env)
    run([python, "-m", "pytest", "-q", "--record-mode=once"], project, env)
    cassettes = project / "tests" / "cassettes" / "test_shop"
    recorded = {path.name: path.read_bytes() for path in cassettes.iterdir()}
    assert set(recorded) == {"test_order.yaml", "test_refund.yaml"}
    served = len(server.seen)
    server.stop()

    # The switch, as the doc says it (pip through uv, the checkout this test runs from).
    steps = documented_steps()
    assert [step[:2] for step in steps] == [
        ["git", "clone"],
        ["pip", "install"],
        ["pip", "uninstall"],
        ["pytest"],
    ], steps
    clone = steps[0][-1]
    for step in steps[1:]:
        if step[0] == "pip":
            arguments = [argument.replace(clone, str(ROOT)) for argument in step[2:]]
            yes = ["-q"] if step[1] == "install" else []
            run([installer, "pip", step[1], *yes, "--python", python, *arguments], project, env)
        else:
            result = run([python, "-m", *step], project, env)
    listed = run([installer, "pip", "list", "--python", python], project, env).stdout
    assert "pytest-recording" not in listed and "agenttape-recorder" in listed
    assert "2 passed" in result.stdout, result.stdout
    assert len(server.seen) == served  # replayed offline
    assert {path.name: path.read_bytes() for path in cassettes.iterdir()} == recorded
