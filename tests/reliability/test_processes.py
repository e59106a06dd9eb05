"""Parallel processes appending to one cassette in new_episodes mode lose nothing.

Each process saves several times while the others save too; the cassette lock and the merge
on save must keep every interaction of every process, once, in a file that always loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import agenttape
from tests.reliability.scale import SOAK, scaled
from tests.servers import Server, path_app, path_body

WORKER = Path(__file__).with_name("worker.py")
PROCESSES = 4


def test_processes_appending_in_new_episodes_lose_nothing(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(path_app())
    blocks, per_block = scaled(10, 30), 20  # 200 interactions per process (600 in a soak)
    seed = ["record", str(cassette_path), "--url", server.url, "--mode", "once", "--tag", "seed"]
    subprocess.run([sys.executable, str(WORKER), *seed, "--count", "5"], check=True)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                "record",
                str(cassette_path),
                "--url",
                server.url,
                "--mode",
                "new_episodes",
                "--tag",
                f"p{number}",
                "--count",
                str(per_block),
                "--blocks",
                str(blocks),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for number in range(PROCESSES)
    ]
    for process in workers:
        _, err = process.communicate()
        assert process.returncode == 0, err.decode()

    interactions = agenttape.load(cassette_path).interactions
    urls = Counter(i.request.url for i in interactions)
    expected = [f"{server.url}/item/seed/0/{i}" for i in range(5)] + [
        f"{server.url}/item/p{n}/{b}/{i}"
        for n in range(PROCESSES)
        for b in range(blocks)
        for i in range(per_block)
    ]
    lost = set(expected) - set(urls)
    assert not lost, f"{len(lost)} interactions lost"
    assert urls == Counter(expected)
    for interaction in interactions:
        assert interaction.response is not None
        path = interaction.request.url[len(server.url) :]
        assert interaction.response.body == path_body(path, 64)
    assert [i.request.url for i in interactions[:5]] == expected[:5]


XDIST_TESTS = """
import os

import httpx
import pytest

import agenttape

URL = os.environ["RELIABILITY_URL"]
CASSETTE = os.environ["RELIABILITY_CASSETTE"]


@pytest.mark.parametrize("worker", range({processes}))
def test_append(worker):
    with httpx.Client() as client:
        for block in range({blocks}):
            with agenttape.use_cassette(CASSETTE, mode="new_episodes"):
                for index in range({per_block}):
                    client.get(f"{{URL}}/x/{{worker}}/{{block}}/{{index}}").raise_for_status()
"""


@pytest.mark.skipif(not SOAK, reason="starts a pytest-xdist session; runs with AGENTTAPE_SOAK=1")
def test_xdist_workers_appending_in_new_episodes_lose_nothing(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(path_app())
    blocks, per_block = 10, 20
    module = tmp_path / "test_parallel_append.py"
    module.write_text(
        textwrap.dedent(XDIST_TESTS.format(processes=PROCESSES, blocks=blocks, per_block=per_block))
    )
    cassette = tmp_path / "cassettes" / "shared.msgpack"
    environment = {
        **os.environ,
        "RELIABILITY_URL": server.url,
        "RELIABILITY_CASSETTE": str(cassette),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            str(PROCESSES),
            "-p",
            "no:cacheprovider",
            str(module),
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    urls = Counter(i.request.url for i in agenttape.load(cassette).interactions)
    expected = Counter(
        f"{server.url}/x/{w}/{b}/{i}"
        for w in range(PROCESSES)
        for b in range(blocks)
        for i in range(per_block)
    )
    assert urls == expected
