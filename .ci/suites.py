"""Other projects' test suites, with agenttape installed and without: installed but inactive,
agenttape changes no outcome (SPEC §17, no footprint while inactive).

Each suite comes from its source distribution on PyPI at a pinned version (``pip download
--no-binary :all:``): pytest-httpx, httpx, requests and vcrpy ship their tests in it. respx's
source distribution holds no tests (none of its releases does), and PyPI is all CI reaches, so
respx is not among them; its interplay with agenttape is tested in tests/test_adapters_httpx.py
and the coexistence matrix.

Each suite gets two environments (uv): one without agenttape, then one with the same packages
at the same versions (the first's ``pip freeze`` as constraints) and agenttape installed from
this checkout (``-e``, its pytest plugin loaded from its entry point). The same selection of
tests runs in both (the offline ones: the ones needing the internet are left out, by marker or
by file, each named below), and the outcomes are compared test by test (junit XML). A test
listed as flaky (with the reason; it must be flaky without agenttape too) is left out of the
comparison. Everything is kept under ``.suites/`` (sources, environments), so that a second
run only runs the tests.

    python .ci/suites.py            # every suite
    python .ci/suites.py httpx      # some, by name

Prints a table (suite, version, passed/failed/skipped with and without, differences); exit
status 0 when no test's outcome differs.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".suites"
RUN_TIMEOUT = 600


@dataclass(frozen=True, slots=True)
class Suite:
    """``requirements``: what its tests need, pinned; ``arguments``: pytest's, the selection."""

    name: str
    version: str
    requirements: tuple[str, ...]
    arguments: tuple[str, ...]
    flaky: dict[str, str] = field(default_factory=dict)  # test id -> why
    # Its two runs (with agenttape and without) at once: the suites wait on their servers
    # and timeouts more than they compute. Not where a test server listens on a fixed port.
    ways_at_once: bool = True


# The longest first (requests' suite takes as long as the other three together): two run at
# a time, so the stage ends when the longest does.
SUITES = (
    Suite(
        "requests",
        "2.34.2",
        (
            "pytest==8.4.2",
            "pytest-httpbin==2.1.0",
            "httpbin==0.10.2",
            "trustme==1.2.1",
            "PySocks==1.7.1",
        ),
        # tests/test_requests.py is left out whole: besides its local httpbin it connects to
        # a blackhole address (10.255.255.1) for its timeouts and resolves names on the
        # internet. The others serve themselves on 127.0.0.1 or need no network.
        ("tests", "--ignore=tests/test_requests.py"),
    ),
    Suite(
        "pytest-httpx",
        "0.36.2",
        ("httpx==0.28.1", "pytest==9.0.2", "pytest-asyncio==1.3.0"),
        # offline: every test mocks httpx
        ("tests",),
    ),
    Suite(
        "httpx",
        "0.28.1",
        (
            "pytest==8.4.2",
            "anyio==4.11.0",
            "trio==0.31.0",
            "trustme==1.2.1",
            "uvicorn==0.38.0",
            "chardet==5.2.0",
            "brotli==1.1.0",
            "zstandard==0.25.0",
            "h2==4.3.0",
            "socksio==1.0.0",
            "click==8.3.0",
            "pygments==2.19.2",
            "rich==13.9.4",
        ),
        # the tests that need the internet carry httpx's own marker
        ("tests", "-m", "not network"),
        # its test server is uvicorn on 127.0.0.1:8000, in every run
        ways_at_once=False,
    ),
    Suite(
        "vcrpy",
        "9.4.2",
        (
            "pytest==9.0.2",  # its configuration is pytest 9's [tool.pytest]
            "pytest-asyncio==1.3.0",
            "pytest-httpbin==2.1.0",
            "httpbin==0.10.2",
            "httpx==0.28.1",
            "requests==2.34.2",
            "urllib3==2.5.0",
            "aiohttp==3.13.2",
        ),
        # the unit tests (a few serve httpbin on 127.0.0.1): tests/integration records from
        # the internet
        ("tests/unit", "-m", "not online"),
    ),
)


@dataclass(slots=True)
class Outcome:
    """One run: each test's outcome (passed, failed, skipped) and the run's exit status."""

    tests: dict[str, str]
    status: int
    output: str

    def count(self, outcome: str) -> int:
        return sum(1 for value in self.tests.values() if value == outcome)


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(found).exists():
        _run([sys.executable, "-m", "pip", "install", "-q", "uv"])
        found = str(Path(sys.executable).parent / "uv")
    return found


def source(suite: Suite) -> Path:
    """The suite's source distribution, downloaded once from PyPI and unpacked."""
    unpacked = CACHE / "src" / f"{suite.name}-{suite.version}"
    if unpacked.is_dir():
        return unpacked
    archives = CACHE / "sdist"
    archives.mkdir(parents=True, exist_ok=True)
    requirement = f"{suite.name}=={suite.version}"
    download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
    _run([*download, "--no-binary", ":all:", "-d", str(archives), requirement])
    stem = f"{suite.name}-{suite.version}.tar.gz".lower().replace("-", "_")
    archive = next(
        path for path in archives.glob("*.tar.gz") if path.name.lower().replace("-", "_") == stem
    )
    staging = CACHE / "src" / f".{suite.name}"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")
    (top,) = staging.iterdir()
    if not (top / "tests").is_dir():
        raise SystemExit(f"{archive.name} holds no tests")
    top.rename(unpacked)
    staging.rmdir()
    return unpacked


def environment(suite: Suite, tree: Path, agenttape: bool) -> Path:
    """The suite's environment, made once for a given list of requirements (a stamp says
    which); the one with agenttape takes the versions of the one without."""
    side = "with" if agenttape else "without"
    place = CACHE / "env" / f"{suite.name}-{suite.version}-{side}"
    python = place / "bin" / "python"
    baseline = CACHE / "env" / f"{suite.name}-{suite.version}-without"
    spec = json.dumps([suite.requirements, agenttape, str(ROOT)])
    if agenttape:  # and how this checkout installs
        spec += (baseline / "frozen.txt").read_text() + (ROOT / "pyproject.toml").read_text()
    stamp = hashlib.sha256(spec.encode()).hexdigest()
    if (place / "stamp").is_file() and (place / "stamp").read_text() == stamp:
        return python
    shutil.rmtree(place, ignore_errors=True)
    uv = _uv()
    _run([uv, "venv", "-q", "--python", sys.executable, str(place)])
    install = [uv, "pip", "install", "-q", "--python", str(python), str(tree), *suite.requirements]
    if agenttape:
        install += ["-e", str(ROOT), "--constraint", str(baseline / "frozen.txt")]
    _run(install)
    if not agenttape:
        frozen = _run([uv, "pip", "freeze", "--python", str(python)]).stdout
        (place / "frozen.txt").write_text(frozen)
    (place / "stamp").write_text(stamp)
    return python


def run(suite: Suite, tree: Path, python: Path, label: str) -> Outcome:
    """The suite's selection of tests in ``python``, from its source tree."""
    report = CACHE / "reports" / f"{suite.name}-{label}.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    removed = ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV")
    env = {
        k: v for k, v in os.environ.items() if k not in removed and not k.startswith("AGENTTAPE")
    }
    command = [str(python), "-m", "pytest", *suite.arguments, "-q", "-p", "no:cacheprovider"]
    command += ["-c", "pyproject.toml", "--rootdir", "."]  # its own configuration, not ours
    command += ["-o", "junit_family=xunit2", f"--junitxml={report}"]
    try:
        done = subprocess.run(
            command,
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        return Outcome({}, -1, f"timed out after {exc.timeout}s")
    tests: dict[str, str] = {}
    if report.is_file():
        for case in ElementTree.parse(report).iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            # a parameter naming a file of the environment (requests: pytest.__file__)
            name = name.replace(str(python.parent.parent), "<environment>")
            kinds = {child.tag for child in case}
            if kinds & {"failure", "error"}:
                outcome = "failed"
            elif "skipped" in kinds:
                outcome = "skipped"
            else:
                outcome = "passed"
            # a test failing at teardown has two entries: the worse one counts
            if tests.get(name) != "failed":
                tests[name] = outcome
    return Outcome(tests, done.returncode, done.stdout[-3000:] + done.stderr[-3000:])


@dataclass(slots=True)
class Result:
    suite: Suite
    without: Outcome
    with_agenttape: Outcome
    seconds: float
    differences: list[str]


def compare(suite: Suite) -> Result:
    started = time.monotonic()
    tree = source(suite)
    baseline = environment(suite, tree, agenttape=False)
    ours = environment(suite, tree, agenttape=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1 + suite.ways_at_once) as pool:
        runs = pool.map(run, (suite, suite), (tree, tree), (baseline, ours), ("without", "with"))
        without, with_agenttape = runs
    differences = []
    for name in sorted(set(without.tests) | set(with_agenttape.tests)):
        if name in suite.flaky:
            continue
        before, after = without.tests.get(name, "absent"), with_agenttape.tests.get(name, "absent")
        if before != after:
            differences.append(f"{name}: {before} without agenttape, {after} with it")
    for label, outcome in (("without", without), ("with", with_agenttape)):
        if outcome.status not in (0, 1) or not outcome.tests:
            differences.append(f"the run {label} agenttape ended with {outcome.status}: no result")
    return Result(suite, without, with_agenttape, time.monotonic() - started, differences)


def _counts(outcome: Outcome) -> str:
    return f"{outcome.count('passed')}/{outcome.count('failed')}/{outcome.count('skipped')}"


def main(names: list[str]) -> int:
    chosen = [suite for suite in SUITES if not names or suite.name in names]
    if not chosen:
        print(f"no such suite: {' '.join(names)}; there are {', '.join(s.name for s in SUITES)}")
        return 2
    for suite in chosen:  # downloads first, one at a time
        source(suite)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compare, chosen))
    header = ("suite", "version", "without p/f/s", "with p/f/s", "differences", "seconds")
    rows = [
        (
            result.suite.name,
            result.suite.version,
            _counts(result.without),
            _counts(result.with_agenttape),
            str(len(result.differences)),
            f"{result.seconds:.0f}",
        )
        for result in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    failing = [result for result in results if result.differences]
    for result in failing:
        print(f"\n{result.suite.name} {result.suite.version}:")
        for line in result.differences[:50]:
            print(f"  {line}")
        if any("no result" in line for line in result.differences):
            print(result.without.output, result.with_agenttape.output, sep="\n")
    print(f"suites: {len(results) - len(failing)} of {len(results)} have the same outcomes")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
