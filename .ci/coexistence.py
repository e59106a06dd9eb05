"""The coexistence matrix: agenttape's pytest plugin beside each pytest plugin users run
(SPEC §17), one cell per plugin and one with all of them at once.

One environment (``.coexist/``, made with uv, whose cache makes it take seconds) holds
agenttape and every plugin; each cell runs tests/coexistence with the plugins it does not name
turned off (``-p no:NAME``) and names the ones it turns on in ``AGENTTAPE_COEXIST``, which the
suite's conftest checks: a cell whose plugin is not active fails instead of passing without it.

    python .ci/coexistence.py           # every cell
    python .ci/coexistence.py syrupy    # some cells, by name

Two cells run at a time. Prints a table (cell, result, passed, failed, skipped, seconds);
exit status 0 when every cell passed.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from junit import counts

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENT = ROOT / ".coexist" / f"{sys.version_info[0]}.{sys.version_info[1]}"
SUITE = ROOT / "tests" / "coexistence"
CELL_TIMEOUT = 300

REQUIREMENTS = [
    "pytest>=8",
    "httpx",
    "requests",
    "pyyaml",
    "vcrpy",
    "inline-snapshot",
    "blockbuster",
    "pytest-randomly",
    "pytest-rerunfailures",
    "syrupy",
    "pytest-socket",
    "time-machine",
    "freezegun",
    "pytest-xdist",
    "pytest-asyncio",
    "anyio",
    "pytest-cov",
    "pytest-timeout",
    "hypothesis",
    "pytest-recording",
]

# The pytest plugins a cell may turn on (their registered names); every other one is off.
PLUGINS = (
    "inline_snapshot",
    "randomly",
    "rerunfailures",
    "syrupy",
    "socket",
    "time_machine",
    "xdist",
    "xdist.looponfail",
    "asyncio",
    "anyio",
    "pytest_cov",
    "timeout",
    "hypothesispytest",
    "recording",
)


@dataclass(frozen=True, slots=True)
class Cell:
    """``features``: what the suite's conftest expects on (plugins and libraries);
    ``plugins``: the pytest plugins left on; ``arguments``: what makes them act."""

    name: str
    features: tuple[str, ...]
    plugins: tuple[str, ...]
    arguments: tuple[str, ...] = ()


# pytest-asyncio (strict mode, its default) runs the async tests of every cell but anyio's.
ASYNCIO = ("asyncio",)
CELLS = (
    Cell("agenttape alone", ASYNCIO, ASYNCIO),
    Cell("inline-snapshot", ("inline-snapshot", *ASYNCIO), ("inline_snapshot", *ASYNCIO)),
    Cell("blockbuster", ("blockbuster", *ASYNCIO), ASYNCIO),
    Cell("pytest-randomly", ("randomly", *ASYNCIO), ("randomly", *ASYNCIO)),
    Cell(
        "pytest-rerunfailures",
        ("rerunfailures", *ASYNCIO),
        ("rerunfailures", *ASYNCIO),
        ("--reruns", "1"),
    ),
    Cell("syrupy", ("syrupy", *ASYNCIO), ("syrupy", *ASYNCIO)),
    Cell(
        "pytest-socket",
        ("socket", *ASYNCIO),
        ("socket", *ASYNCIO),
        ("--disable-socket", "--allow-unix-socket"),
    ),
    Cell("time-machine", ("time-machine", *ASYNCIO), ("time_machine", *ASYNCIO)),
    Cell("freezegun", ("freezegun", *ASYNCIO), ASYNCIO),
    Cell("pytest-xdist", ("xdist", *ASYNCIO), ("xdist", *ASYNCIO), ("-n", "2")),
    Cell(
        "pytest-asyncio strict",
        ("asyncio-strict", *ASYNCIO),
        ASYNCIO,
        ("-o", "asyncio_mode=strict"),
    ),
    Cell("pytest-asyncio auto", ("asyncio-auto", *ASYNCIO), ASYNCIO, ("-o", "asyncio_mode=auto")),
    Cell("anyio", ("anyio",), ("anyio",)),
    Cell(
        "pytest-cov",
        ("cov", *ASYNCIO),
        ("pytest_cov", *ASYNCIO),
        ("--cov=agenttape", "--cov-report="),
    ),
    Cell("pytest-timeout", ("timeout", *ASYNCIO), ("timeout", *ASYNCIO), ("--timeout", "120")),
    Cell("hypothesis", ("hypothesis", *ASYNCIO), ("hypothesispytest", *ASYNCIO)),
    # pytest-recording itself: vcrpy serves the YAML cassettes, agenttape stays out of its way.
    Cell("pytest-recording", ("recording", *ASYNCIO), ("recording", *ASYNCIO)),
    Cell(
        "all at once",
        (
            "inline-snapshot",
            "blockbuster",
            "randomly",
            "rerunfailures",
            "syrupy",
            "socket",
            "time-machine",
            "freezegun",
            "xdist",
            "asyncio",
            "asyncio-auto",
            "anyio",
            "cov",
            "timeout",
            "hypothesis",
        ),
        tuple(name for name in PLUGINS if name != "recording"),
        (
            "-n",
            "2",
            "--reruns",
            "1",
            "--disable-socket",
            "--allow-unix-socket",
            "--cov=agenttape",
            "--cov-report=",
            "--timeout",
            "120",
            "-o",
            "asyncio_mode=auto",
        ),
    ),
)


@dataclass(slots=True)
class Result:
    cell: Cell
    status: int
    passed: int
    failed: int
    skipped: int
    seconds: float
    output: str


def build(uv: str) -> None:
    """``.coexist/``: agenttape (editable) and every plugin, in one environment."""
    python = ENVIRONMENT / "bin" / "python"
    if not python.exists():
        subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(ENVIRONMENT)], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), "-e", str(ROOT), *REQUIREMENTS],
        check=True,
    )


def run(cell: Cell, scratch: Path) -> Result:
    """One cell, its files (JUnit report, coverage data) in ``scratch``."""
    scratch.mkdir()
    report = scratch / "report.xml"
    command = [
        str(ENVIRONMENT / "bin" / "python"),
        "-m",
        "pytest",
        "-c",
        str(SUITE / "pytest.ini"),
        "--rootdir",
        str(SUITE),
        "-q",
        "-rfE",
        f"--junitxml={report}",
        *(part for name in PLUGINS if name not in cell.plugins for part in ("-p", f"no:{name}")),
        *cell.arguments,
        str(SUITE),
    ]
    environment = {
        **os.environ,
        "AGENTTAPE_COEXIST": ",".join(cell.features),
        "COVERAGE_FILE": str(scratch / ".coverage"),  # not in the source tree
    }
    environment.pop("PYTEST_ADDOPTS", None)
    start = time.perf_counter()
    try:
        completed = subprocess.run(
            command,
            cwd=SUITE,
            env=environment,
            capture_output=True,
            text=True,
            timeout=CELL_TIMEOUT,
        )
        status, output = completed.returncode, completed.stdout + completed.stderr
    except subprocess.TimeoutExpired as expired:
        status, output = -1, f"timed out after {CELL_TIMEOUT} s\n{expired.stdout or ''}"
    seconds = time.perf_counter() - start
    return Result(cell, status, *counts(report), seconds, output)


def main(argv: list[str]) -> int:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        print("uv is needed: python -m pip install uv", file=sys.stderr)
        return 2
    cells = [cell for cell in CELLS if not argv or cell.name in argv]
    build(uv)
    with (
        tempfile.TemporaryDirectory() as scratch,
        concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool,
    ):
        results = list(pool.map(lambda cell: run(cell, Path(scratch) / str(id(cell))), cells))
    for result in results:
        if result.status != 0:
            print(f"--- {result.cell.name} (exit status {result.status}) ---")
            print(result.output[-6000:])
    width = max(len(cell.name) for cell in cells)
    print(f"{'cell':<{width}}  result  passed  failed  skipped  seconds")
    for result in results:
        verdict = "ok" if result.status == 0 else "FAILED"
        print(
            f"{result.cell.name:<{width}}  {verdict:<6}  {result.passed:>6}  "
            f"{result.failed:>6}  {result.skipped:>7}  {result.seconds:>7.1f}"
        )
    broken = [result.cell.name for result in results if result.status != 0]
    print(
        f"coexistence (Python {sys.version.split()[0]}): {len(results) - len(broken)} of "
        f"{len(results)} cells pass"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
