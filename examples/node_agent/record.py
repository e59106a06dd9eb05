"""Records ``cassettes/agent.msgpack`` afresh: the Node agent runs under ``agenttape run`` in
mode ``all`` while its calls to api.openai.com go to the local API stand-in
(``examples/llm_standin.py``), so no key and no network are needed. The cassette still names
https://api.openai.com, the URL the agent asked for, so it replays with no option at all:

    python examples/node_agent/record.py        # needs Node and `npm install` in this folder
    agenttape run -- node examples/node_agent/agent.mjs
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from llm_standin import StandIn  # noqa: E402


def record(cassette: Path) -> int:
    with StandIn(chunk_delay=0.02) as standin:
        environment = {**os.environ, "OPENAI_API_KEY": "sk-standin-placeholder"}
        environment.pop("OPENAI_BASE_URL", None)
        command = [
            sys.executable,
            "-m",
            "agenttape",
            "run",
            "--mode",
            "all",
            "--cassette",
            str(cassette),
            "--route",
            f"https://api.openai.com={standin.url}",
            "--",
            "node",
            str(HERE / "agent.mjs"),
        ]
        return subprocess.run(command, env=environment, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cassette", type=Path, default=ROOT / "cassettes" / "agent.msgpack")
    sys.exit(record(parser.parse_args().cassette))


if __name__ == "__main__":
    main()
