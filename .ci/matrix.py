"""The version matrix: each adapted library at its oldest supported, a middle and its newest
version, each in an environment of its own (made with uv, whose cache makes it take seconds),
running that library's adapter and agreement tests against the real library and local
servers. Three cells run at a time.

    python .ci/matrix.py              # every cell
    python .ci/matrix.py websockets   # the cells of one library
    python .ci/matrix.py --newest     # each library's newest version only

docs/libraries.md states the same versions ("tested" columns); tests/test_matrix_table.py
keeps the two in step. Exit status 0 when every cell passed.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One folder of environments per Python (CI runs the newest cells on 3.14 too).
ENVIRONMENTS = ROOT / ".matrix" / f"{sys.version_info[0]}.{sys.version_info[1]}"

# What every cell's tests need besides the library under test (tests/conftest.py imports httpx
# and the stand-ins; the WebSocket tests' server is the websockets library's). The SDKs, slow to
# install and to import, are only in the cells of their own tests.
BASE = [
    "pytest>=8",
    "pytest-asyncio>=0.23",
    "anyio>=4",
    "trustme>=1.1",
    "msgpack>=1.0",
    "hypothesis",
    # async tests run under it (tests/conftest.py)
    "blockbuster>=1.5",
]
SDKS = ["httpx", "websockets"]
_RECORDING = ("pytest-recording>=0.13", "pytest-xdist")


@dataclass(frozen=True)
class Library:
    name: str
    versions: tuple[str, str, str]  # oldest supported, a middle one, the newest
    tests: tuple[str, ...]  # the cells' tests (none where ``parts`` names them)
    # Pins that go with a version (what that version's users resolve alongside it).
    companions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # What SDKS entry the library replaces (its own pin wins).
    replaces: str | None = None
    # A pytest -k expression: the tests of those files that exercise this library.
    select: str | None = None
    # The library whose cells also test this one: each of its versions is pinned there, the
    # oldest beside the oldest and so on (no cells of its own).
    runs_in: str | None = None
    # Installed again, last: a distribution that takes another's import name (urllib3-future
    # writes urllib3/, as urllib3 does; uv installs both at once, so either could win).
    last: tuple[str, ...] = ()
    # The tests in named parts, each a cell of its own (and an environment of its own, as
    # cells run at once), where one cell of them all would come near CELL_TIMEOUT.
    parts: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def groups(self) -> dict[str, tuple[str, ...]]:
        """The cells' tests for each version, by part ("" where the tests are one cell)."""
        return self.parts or {"": self.tests}


LIBRARIES = (
    Library(
        "websockets",
        ("12.0", "15.0.1", "17.4"),
        ("tests/test_websocket.py",),
        replaces="websockets",
    ),
    Library(
        "urllib3",
        ("1.26.20", "2.2.3", "2.8.0"),
        (
            "tests/test_adapters_urllib3.py",
            "tests/test_adapters_requests.py",
            "tests/test_adapters_http_client.py",
        ),
        companions={
            # requests 2.28 and botocore 1.29 are what pins urllib3 below 2.
            "1.26.20": ("requests==2.28.2", "botocore==1.29.165", "boto3==1.26.165"),
            "2.2.3": ("requests==2.32.3", "boto3", "botocore"),
            "2.8.0": ("requests", "boto3", "botocore"),
        },
    ),
    Library(
        "httpx",
        ("0.23.3", "0.26.0", "0.28.1"),
        ("tests/test_adapters_httpx.py",),
        # httpx2 needs an httpx newer than 0.23
        companions={
            "0.23.3": ("respx",),
            "0.26.0": ("httpx2", "respx"),
            "0.28.1": ("httpx2", "respx"),
        },
        replaces="httpx",
    ),
    Library(
        "aiohttp",
        ("3.8.6", "3.10.11", "3.14.5"),
        ("tests/test_adapters_aiohttp.py", "tests/test_adapters_aiohttp_ws.py"),
        companions={
            version: ("requests", "httpx-aiohttp") for version in ("3.8.6", "3.10.11", "3.14.5")
        },
    ),
    Library(
        "websocket-client",
        ("1.6.4", "1.8.0", "1.9.2"),
        ("tests/test_adapters_websocket_client.py",),
    ),
    Library(
        "httpx-ws",
        ("0.6.2", "0.7.2", "0.9.0"),
        ("tests/test_adapters_httpx_ws.py",),
    ),
    Library(
        "httpx2",
        ("2.0.0", "2.8.0", "2.16.2"),
        ("tests/test_adapters_httpx.py",),
        select="httpx2",
    ),
    # The SDKs against the local API stand-in, both in each cell (their tests import both): openai
    # below 3 and anthropic below 1 are built on httpx (the oldest on an httpx that still takes
    # proxies=, openai 1.0 on anyio 3), the later ones on httpx2.
    Library(
        "openai",
        ("1.0.0", "2.8.1", "3.57.0"),
        ("tests/test_sdks.py", "tests/test_sdk_retries.py"),
        companions={
            "1.0.0": ("anthropic==0.30.1", "httpx==0.27.2", "anyio<4"),
            "2.8.1": ("anthropic==0.75.0",),
            "3.57.0": ("anthropic==2.14.0",),
        },
    ),
    Library(
        "curl_cffi",
        ("0.7.4", "0.11.4", "0.17.0"),
        ("tests/test_adapters_curl_cffi.py",),
    ),
    Library(
        "pycurl",
        ("7.45.7", "7.47.0", "7.49.0"),
        ("tests/test_adapters_pycurl.py",),
    ),
    Library(
        "primp",
        ("0.15.0", "1.2.3", "2.0.1"),
        ("tests/test_adapters_primp.py",),
    ),
    Library(
        "anthropic",
        ("0.30.1", "0.75.0", "2.14.0"),
        ("tests/test_sdks.py", "tests/test_sdk_retries.py"),
        runs_in="openai",
    ),
    # httplib2 with the Google API client on it.
    Library(
        "httplib2",
        ("0.20.4", "0.22.0", "0.32.1"),
        ("tests/test_adapters_httplib2.py",),
        companions={
            version: ("google-api-python-client",) for version in ("0.20.4", "0.22.0", "0.32.1")
        },
    ),
    Library(
        "tornado",
        ("6.2", "6.4.2", "6.6.1"),
        ("tests/test_adapters_tornado.py",),
    ),
    # niquests brings urllib3-future, which takes the name urllib3: requests beside it is
    # tested in the same cells (its own tests and the shared ones).
    Library(
        "niquests",
        ("3.0.2", "3.11.4", "3.21.2"),
        ("tests/test_adapters_niquests.py",),
        # each beside the oldest urllib3-future it allows
        companions={
            "3.0.2": ("requests", "urllib3-future==2.0.936"),
            "3.11.4": ("requests", "urllib3-future==2.12.900"),
            "3.21.2": ("requests",),
        },
        last=("urllib3-future",),
    ),
    # The pytest-recording drop-in reads vcrpy's cassettes through vcrpy itself, and answers
    # as its Cassette: its record modes became an enum in the merged config only in 8.2.1,
    # and the list of played interactions came in 8.0. Before 8.0 vcrpy itself records no
    # binary httpx body nor an httpx stream, and has no drop_unused_requests: the tests that
    # record those with vcrpy say so. In two parts: all the tests in one cell took 130 s of
    # CELL_TIMEOUT's 180 beside two other cells, and over 180 when other suites loaded the
    # machine as well.
    Library(
        "vcrpy",
        ("6.0.2", "8.1.1", "9.4.2"),
        (),
        parts={
            # vcrpy's cassettes converted, served by the tape, hostile ones refused
            "cassettes": (
                "tests/test_vcr.py",
                "tests/test_vcr_tape.py",
                "tests/test_vcr_bodies.py",
                "tests/test_recording_plugin_hostile.py",
            ),
            # suites recorded with pytest-recording, run on the drop-in
            "suites": ("tests/test_recording_plugin.py",),
        },
        # The clients the drop-in's tests drive, as their users resolve them beside each
        # vcrpy (whose stubs before 8.2 need an aiohttp before 3.14, and before 9 know no
        # httpx2), and pytest-recording (what the suites are recorded with and compared
        # against) with xdist (drift reported across workers).
        companions={
            "6.0.2": (
                "httpx==0.27.2",
                "urllib3==2.2.3",
                "requests==2.32.3",
                "aiohttp==3.10.11",
                "boto3",
                *_RECORDING,
            ),
            "8.1.1": ("requests", "aiohttp<3.14", "boto3", *_RECORDING),
            "9.4.2": ("requests", "aiohttp", "boto3", "httpx2", *_RECORDING),
        },
    ),
)


@dataclass
class Result:
    library: str
    version: str
    outcome: str
    seconds: float
    log: Path


CELL_TIMEOUT = 180  # seconds a cell's tests may take before they count as failed


def run(command: list[str], log: Path, **options: object) -> int:
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        try:
            completed = subprocess.run(  # type: ignore[call-overload]
                command, stdout=out, stderr=subprocess.STDOUT, timeout=CELL_TIMEOUT, **options
            )
        except subprocess.TimeoutExpired:
            out.write(f"\ntimed out after {CELL_TIMEOUT} s\n")
            return 124
        return int(completed.returncode)


def name_of(requirement: str) -> str:
    """The distribution a requirement names (``anyio<4`` -> ``anyio``)."""
    return re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0].lower()


def build_wheel(uv: str) -> Path:
    """This checkout as a wheel, built once: every cell installs it (an editable install
    would build it again in each of them)."""
    out = ENVIRONMENTS / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(
        [uv, "build", "-q", "--wheel", "--out-dir", str(out), str(ROOT)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    [wheel] = out.glob("*.whl")
    return wheel


def cell(uv: str, wheel: Path, library: Library, version: str, part: str) -> Result:
    started = time.monotonic()
    slug = f"{library.name}-{version}" + (f"-{part}" if part else "")
    label = f"{version} ({part})" if part else version
    environment = ENVIRONMENTS / slug
    log = ENVIRONMENTS / f"{slug}.log"
    log.unlink(missing_ok=True)
    python = environment / "bin" / "python"
    pins = [f"{library.name}=={version}", *library.companions.get(version, ())]
    pinned = {name_of(pin) for pin in pins}  # a pin replaces what BASE or SDKS say of it
    wanted = [
        *(requirement for requirement in BASE if name_of(requirement) not in pinned),
        *(sdk for sdk in SDKS if sdk != library.replaces and sdk not in pinned),
        *pins,
        str(wheel),
    ]
    if not python.exists() and run([uv, "venv", "-q", "-p", sys.executable, str(environment)], log):
        return Result(library.name, label, "environment failed", time.monotonic() - started, log)
    install = [uv, "pip", "install", "-q", "--reinstall-package", "agenttape-recorder"]
    if run([*install, "--python", str(python), *wanted], log):
        return Result(library.name, label, "install failed", time.monotonic() - started, log)
    for name in library.last:
        pinned_last = [pin for pin in pins if name_of(pin) == name] or [name]
        command = [uv, "pip", "install", "-q", "--no-deps", "--reinstall-package", name]
        if run([*command, "--python", str(python), *pinned_last], log):
            return Result(library.name, label, "install failed", time.monotonic() - started, log)
    env = dict(os.environ)
    env.pop("AGENTTAPE_MODE", None)
    select = ["-k", library.select] if library.select else []
    command = [
        *(str(python), "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly"),
        *select,
        *library.groups()[part],
    ]
    status = run(command, log, cwd=ROOT, env=env)
    crashed = ""
    if status < 0:
        # A native crash (an old libcurl aborting in its own thread, say) is run once more,
        # and the table says so: a failing test fails both times, a crash twice fails too.
        crashed = f", after a crash (pytest exit {status}) on the first run"
        status = run(command, log, cwd=ROOT, env=env)
    outcome = {0: "passed", 5: "no tests", 124: "timed out"}.get(
        status, f"failed (pytest exit {status}{crashed})"
    )
    if status == 0:
        tail = log.read_text().strip().splitlines()[-1]
        outcome = f"passed ({tail.strip('= ').split(' in ')[0]}{crashed})"
    return Result(library.name, label, outcome, time.monotonic() - started, log)


def main(argv: list[str]) -> int:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        print("uv is needed: python -m pip install uv", file=sys.stderr)
        return 2
    newest = "--newest" in argv
    argv = [argument for argument in argv if argument != "--newest"]
    named = set(argv) | {lib.runs_in for lib in LIBRARIES if lib.runs_in and lib.name in argv}
    chosen = [lib for lib in LIBRARIES if not lib.runs_in and (not argv or lib.name in named)]
    ENVIRONMENTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    wheel = build_wheel(uv)
    jobs = [
        (library, version, part)
        for library in chosen
        for version in (library.versions[-1:] if newest else library.versions)
        for part in library.groups()
    ]
    # Three cells at a time: two kept the cores 40% idle (the cells wait on their servers
    # and on uv's copies as much as they compute).
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda job: cell(uv, wheel, *job), jobs))
    print("\n| library | version | result | seconds |\n|---|---|---|---|")
    for result in results:
        print(f"| {result.library} | {result.version} | {result.outcome} | {result.seconds:.0f} |")
    failed = [r for r in results if not r.outcome.startswith(("passed", "no tests"))]
    for result in failed:
        print(
            f"\n--- {result.library} {result.version}: {result.outcome}, last lines of {result.log}"
        )
        print("\n".join(result.log.read_text().splitlines()[-30:]))
    print(
        f"\nmatrix (Python {sys.version.split()[0]}): {len(results) - len(failed)} of "
        f"{len(results)} cells passed in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
