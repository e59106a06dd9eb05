"""A synthetic pytest-recording suite, run under vcrpy + pytest-recording, cassetter and
agenttape's drop-in: wall time of the same suite, side by side.

    python -m bench.vcr_suite                   # 360 tests, 3 runs each, best of
    python -m bench.vcr_suite --tests 120 --runs 1
    python -m bench.vcr_suite --client-per-module   # the plugins' own share, SDK clients reused

The suite is what such suites look like: test modules of ``@pytest.mark.vcr`` tests calling
the OpenAI SDK (chat completions, one in four streamed, one in three a tool-call turn of two
calls), a conftest with ``vcr_config`` filtering the authorization header, and YAML cassettes
written by vcrpy's own serializer. Each runner is a fresh ``pytest`` process with the other
two plugins disabled (``-p no:...``); the suite runs offline, in record mode ``none``. The
runners take turns, run after run, so a machine busy with other work weighs on each alike,
after one untimed run each (bytecode compiled, as on a developer's machine; agenttape's cache
of parsed YAML filled, as after a project's first run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_URL = "https://api.openai.com/v1"
MODULES = 6

CONFTEST = """
import openai
import pytest


@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"]}


@pytest.fixture(CLIENT_SCOPE)
def client():
    with openai.OpenAI(api_key="sk-test", base_url="BASE_URL", max_retries=0) as client:
        yield client
"""

TEST = """

@pytest.mark.vcr
def test_{n}(client):
{body}
"""

PLAIN = """    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{{"role": "user", "content": "question {n}"}}]
    )
    assert answer.choices[0].message.content == "answer {n}"
"""

STREAMED = """    parts = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{{"role": "user", "content": "question {n}"}}], stream=True
    )
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == "answer {n}"
"""

TOOL_TURN = """    messages = [{{"role": "user", "content": "question {n}"}}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {{"role": "tool", "tool_call_id": call.id, "content": "42"}}]
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert answer.choices[0].message.content == "answer {n}"
"""


def _completion(n: int, message: dict[str, object]) -> bytes:
    return json.dumps(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
            "system_fingerprint": "fp_0000",
        }
    ).encode()


def _stream(n: int) -> bytes:
    events = []
    for piece in ("answer", " ", str(n)):
        chunk = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000 + n,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
        }
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return b"".join(events) + b"data: [DONE]\n\n"


def _interaction(body: dict[str, object], answer: bytes, streamed: bool) -> tuple[object, dict]:
    from vcr.request import Request

    request = Request(
        "POST",
        f"{BASE_URL}/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "accept": "application/json"},
    )
    kind = "text/event-stream" if streamed else "application/json"
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {
            "content-type": [kind],
            "content-length": [str(len(answer))],
            "x-request-id": ["req_0001"],
            "openai-processing-ms": ["412"],
        },
        "body": {"string": answer},
    }
    return request, response


def _cassette(n: int) -> tuple[str, list[tuple[object, dict]]]:
    question = [{"role": "user", "content": f"question {n}"}]
    final = {"role": "assistant", "content": f"answer {n}"}
    if n % 4 == 1:
        body = {"messages": question, "model": "gpt-4o-mini", "stream": True}
        return STREAMED, [_interaction(body, _stream(n), True)]
    if n % 3 == 2:
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        first = {"role": "assistant", "content": None, "tool_calls": [call]}
        turn = [
            *question,
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": "42"},
        ]
        return TOOL_TURN, [
            _interaction(
                {"messages": question, "model": "gpt-4o-mini"}, _completion(n, first), False
            ),
            _interaction({"messages": turn, "model": "gpt-4o-mini"}, _completion(n, final), False),
        ]
    body = {"messages": question, "model": "gpt-4o-mini"}
    return PLAIN, [_interaction(body, _completion(n, final), False)]


def write_suite(root: Path, tests: int, *, client_per_module: bool = False) -> None:
    """The suite's files: conftest, test modules, and a YAML cassette per test."""
    from vcr.serialize import serialize
    from vcr.serializers import yamlserializer

    scope = 'scope="module"' if client_per_module else 'scope="function"'
    conftest = CONFTEST.replace("BASE_URL", BASE_URL).replace("CLIENT_SCOPE", scope)
    (root / "conftest.py").write_text(conftest)
    (root / "pytest.ini").write_text(
        "[pytest]\naddopts = -p no:cacheprovider\nasyncio_default_fixture_loop_scope = function\n"
    )
    per_module = -(-tests // MODULES)
    for module in range(MODULES):
        name = f"test_agent_{module}"
        cassettes = root / "cassettes" / name
        cassettes.mkdir(parents=True)
        source = ["import pytest\n"]
        for n in range(module * per_module, min(tests, (module + 1) * per_module)):
            template, interactions = _cassette(n)
            source.append(TEST.format(n=n, body=template.format(n=n)))
            requests = [request for request, _ in interactions]
            responses = [response for _, response in interactions]
            text = serialize({"requests": requests, "responses": responses}, yamlserializer)
            (cassettes / f"test_{n}.yaml").write_text(text)
        (root / f"{name}.py").write_text("".join(source))


RUNNERS = {
    "vcrpy + pytest-recording": ["-p", "no:agenttape", "-p", "no:cassetter"],
    "cassetter": ["-p", "no:agenttape", "-p", "no:recording"],
    "agenttape (drop-in)": ["-p", "no:recording", "-p", "no:cassetter"],
}


def _environment(cache: Path) -> dict[str, str]:
    """As a developer's machine has it: bytecode written (and read) for every module, and
    agenttape's cache of parsed YAML in a folder of this benchmark's own."""
    environment = {**os.environ, "AGENTTAPE_CACHE_DIR": str(cache)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


def run(root: Path, flags: list[str], cache: Path) -> tuple[float, float]:
    """One run of the suite: its wall time and the CPU time it took (user and system), the
    one that stays put on a machine shared with other work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", *flags],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env=_environment(cache),
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if result.returncode != 0:
        raise SystemExit(
            f"{' '.join(flags)} failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=360)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", help="one runner's name, as the table shows it")
    parser.add_argument(
        "--client-per-module",
        action="store_true",
        help="one SDK client per test module, made before any cassette, instead of one per test",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agenttape-vcr-suite-"))
    try:
        write_suite(root, args.tests, client_per_module=args.client_per_module)
        print(
            f"{args.tests} tests in {MODULES} modules, {args.runs} run(s) each, the runners "
            "taking turns; best and median wall time, then CPU time (user + system)"
        )
        names = [name for name in RUNNERS if not args.only or args.only == name]
        for name in names:  # untimed: bytecode compiled, agenttape's YAML cache filled
            run(root, RUNNERS[name], root / ".cache")
        walls: dict[str, list[float]] = {name: [] for name in names}
        cpus: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.runs):
            for name in names:
                elapsed, cpu = run(root, RUNNERS[name], root / ".cache")
                walls[name].append(elapsed)
                cpus[name].append(cpu)
                print(f"  {name}: {elapsed:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        for name in names:
            print(
                f"{name:26} wall best {min(walls[name]):6.2f} s  median "
                f"{statistics.median(walls[name]):6.2f} s   CPU best {min(cpus[name]):6.2f} s  "
                f"median {statistics.median(cpus[name]):6.2f} s"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
