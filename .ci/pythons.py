"""The suite on the other CPythons users run (3.13, 3.14, and the next one's pre-release).

Where ``python3.X`` is on PATH it is used as it is. Elsewhere (a Debian or Ubuntu machine
whose own Python is another), the interpreters come from Debian's unstable suite, which
packages every CPython from 3.13 on: a minimal root made once with debootstrap (about 30 s, a
few GB with the browser, Java and Node the suite also drives), kept in ``ROOT`` and reused by
every later run on the machine, with this checkout bound into it at the same path. That route
needs root (debootstrap, mount, chroot), as CI has.

    python .ci/pythons.py 3.14                       # the whole suite on 3.14
    python .ci/pythons.py 3.13 3.14 --prerelease 3.15   # as CI runs them, at once
    python .ci/pythons.py 3.14 -- tests/test_ledger.py  # some tests
    python .ci/pythons.py --exec 3.14 -- python .ci/matrix.py --newest   # any command

Each version has its own environment (``.[dev]`` installed editable, as README's test command
does). Prints a table (Python, passed, failed, skipped, seconds); exit status 0 when every
version but the pre-releases passed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from junit import counts

CHECKOUT = Path(__file__).resolve().parent.parent
ROOT = Path(os.environ.get("AGENTTAPE_PYTHONS_ROOT", "/var/cache/agenttape/debian-sid"))
SUITE_TIMEOUT = 40 * 60  # seconds one version's suite may take before it counts as failed

# What the root holds beside the interpreters: what the suite drives (curl, Node and npm for
# the openai npm package, Chromium for the page 'agenttape view' writes, Java for Spark) and
# what builds the few dependencies without wheels for a new CPython.
PACKAGES = (
    "ca-certificates",
    "build-essential",
    "libcurl4-openssl-dev",
    "libssl-dev",
    "curl",
    "git",
    "nodejs",
    "npm",
    "chromium",
    "default-jre-headless",
)
# On the newest Python CI runs, every DeprecationWarning fails the suite but those raised in
# these libraries' own modules, each for its reason (agenttape's own raise none, anywhere).
STRICT_ON = "3.14"
THIRD_PARTY_DEPRECATIONS = {
    # cohere 5 calls asyncio.iscoroutinefunction, deprecated in 3.14 (test_fault_shapes,
    # test_provider_keys build its client).
    "cohere.client": "asyncio.iscoroutinefunction in cohere's client",
    # ... and reads pydantic's __fields__ when it parses an error body.
    "cohere.core.unchecked_base_model": "pydantic's __fields__ in cohere's models",
    # The openai SDK's sync Realtime client opens websockets' connect() outside a with block.
    "openai._websocket_connection": "websockets' connect() outside a with block",
    # test_network_guard forks on purpose, from a process with threads: children must inherit
    # the guard under every start method.
    "multiprocessing.popen_fork": "fork() in a process with threads",
}
# The mirror's unstable suite may be older than its Valid-Until while still the newest served.
APT = ("apt-get", "-o", "Acquire::Check-Valid-Until=false", "-q", "-y")


@dataclass(frozen=True, slots=True)
class Interpreter:
    version: str
    prefix: tuple[str, ...]  # what runs a command where the interpreter is (chroot or nothing)
    environment: Path  # the version's virtual environment, as the prefix sees it

    @property
    def python(self) -> str:
        return str(self.environment / "bin" / "python")


def run(command: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=True, text=True, **options)  # type: ignore[call-overload, no-any-return]


def mirror() -> str:
    """The Debian mirror apt already uses on this machine."""
    for sources in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        with contextlib.suppress(OSError):
            for line in sources.read_text().splitlines():
                words = line.partition("#")[0].split()  # a comment names a mirror not in use
                for word in words:
                    if word.startswith("http") and "/debian" in word and "security" not in word:
                        return word.rstrip("/")
    return "http://deb.debian.org/debian"


def packages(versions: list[str]) -> list[str]:
    wanted = [f"python{v}{suffix}" for v in versions for suffix in ("", "-venv", "-dev")]
    return [*wanted, *PACKAGES]


def build_root(versions: list[str]) -> None:
    """Makes ``ROOT`` if it is missing, and installs what it lacks of ``versions``."""
    stamp = ROOT / "etc" / "agenttape-packages"
    wanted = packages(versions)
    if stamp.exists() and set(wanted) <= set(stamp.read_text().split()):
        return
    if os.geteuid() != 0:
        raise SystemExit(
            f"No python{versions[0]} on PATH, and the Debian root that provides one needs root "
            "(debootstrap, mount, chroot): run as root, or put the interpreter on PATH."
        )
    if not (ROOT / "usr" / "bin").exists():
        if shutil.which("debootstrap") is None:
            run(["apt-get", "-q", "update"], stdout=subprocess.DEVNULL)
            run(["apt-get", "-q", "-y", "install", "debootstrap"], stdout=subprocess.DEVNULL)
        ROOT.mkdir(parents=True, exist_ok=True)
        print(f"pythons: making a Debian unstable root in {ROOT}", flush=True)
        run(
            ["debootstrap", "--variant=minbase", "sid", str(ROOT), mirror()],
            stdout=subprocess.DEVNULL,
        )
    share_files()
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    inside = ["chroot", str(ROOT)]
    # Java's package runs java as it installs, which needs /proc.
    proc = ROOT / "proc"
    unmount_left(proc)
    run(["mount", "-t", "proc", "proc", str(proc)])
    try:
        # An install stopped half-way (killed, or a package that failed) is finished first.
        run([*inside, "dpkg", "--configure", "-a"], stdout=subprocess.DEVNULL, env=environment)
        run([*inside, *APT, "update"], stdout=subprocess.DEVNULL, env=environment)
        run(
            [*inside, *APT, "--no-install-recommends", "install", *wanted],
            stdout=subprocess.DEVNULL,
            env=environment,
        )
    finally:
        subprocess.run(["umount", "-l", str(proc)], check=False)
    previous = stamp.read_text().split() if stamp.exists() else []
    stamp.write_text("\n".join(sorted({*previous, *wanted})) + "\n")


def share_files() -> None:
    """The machine's name look-ups and trusted certificates, as they are now."""
    for name in ("etc/hosts", "etc/resolv.conf", "etc/ssl/certs/ca-certificates.crt"):
        with contextlib.suppress(OSError):
            shutil.copyfile(Path("/") / name, ROOT / name)


def unmount_left(target: Path) -> None:
    """What a run that was killed left mounted at ``target`` (a bind of a checkout deleted
    since cannot be mounted over), let go before mounting again."""
    with open("/proc/self/mounts", encoding="utf-8") as table:
        points = {line.split()[1] for line in table if line.strip()}
    if str(target) in points:  # os.path.ismount misses binds within one file system
        subprocess.run(["umount", "-R", "-l", str(target)], check=False, capture_output=True)


@contextlib.contextmanager
def mounted() -> Iterator[None]:
    """The kernel's file systems and this checkout, bound into the root for as long as the
    runs take (the checkout at its own path, so editable installs point at it alike)."""
    targets: list[Path] = []
    share_files()
    try:
        # /sys too: Java reads its container's limits from the cgroup files that
        # /proc/self/mountinfo names, and must find them where it says they are.
        kernel = (
            ("/proc", ["-t", "proc", "proc"]),
            ("/dev", ["--rbind", "/dev"]),
            ("/sys", ["--rbind", "/sys"]),
        )
        for source, options in kernel:
            target = ROOT / source.lstrip("/")
            unmount_left(target)
            run(["mount", *options, str(target)])
            targets.append(target)
        checkout = ROOT / str(CHECKOUT).lstrip("/")
        unmount_left(checkout)
        checkout.mkdir(parents=True, exist_ok=True)
        run(["mount", "--bind", str(CHECKOUT), str(checkout)])
        targets.append(checkout)
        yield
    finally:
        for target in reversed(targets):
            subprocess.run(["umount", "-R", "-l", str(target)], check=False)


def runs(command: str) -> bool:
    """Whether ``command`` is on PATH and starts (a pyenv shim of a version not selected
    is on PATH and does not)."""
    found = shutil.which(command)
    return (
        found is not None and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0
    )


def interpreter(version: str) -> Interpreter:
    if runs(f"python{version}"):
        return Interpreter(version, (), CHECKOUT / ".pythons" / version)
    return Interpreter(version, ("chroot", str(ROOT)), Path("/opt/agenttape") / version)


def inside(interp: Interpreter, command: str) -> list[str]:
    """``command`` run by bash where the interpreter is, from the checkout."""
    return [*interp.prefix, "bash", "-c", f"cd {shlex.quote(str(CHECKOUT))} && {command}"]


def prepare(interp: Interpreter, log: Path) -> None:
    """The version's environment, with ``.[dev]`` (and Spark, as CI's main run has)."""
    python, env = interp.python, shlex.quote(str(interp.environment))
    steps = [
        f"test -x {python} || python{interp.version} -m venv {env}",
        f"test -x {env}/bin/uv || {python} -m pip install -q uv",
        # The environment outlives the checkout it was made from: agenttape is installed
        # again each time, from this one.
        f'{env}/bin/uv pip install -q --python {python} -e ".[dev]" pyspark '
        "--reinstall-package agenttape-recorder",
    ]
    with log.open("a") as out:
        for step in steps:
            subprocess.run(inside(interp, step), stdout=out, stderr=subprocess.STDOUT, check=True)


@dataclass(slots=True)
class Outcome:
    version: str
    status: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    log: Path | None = None


def suite(interp: Interpreter, arguments: list[str]) -> Outcome:
    started = time.monotonic()
    logs = CHECKOUT / ".pythons"
    logs.mkdir(exist_ok=True)
    log, report = logs / f"{interp.version}.log", logs / f"{interp.version}.xml"
    log.write_text("")
    report.unlink(missing_ok=True)
    try:
        prepare(interp, log)
    except subprocess.CalledProcessError:
        return Outcome(interp.version, 3, seconds=time.monotonic() - started, log=log)
    pytest = " ".join(shlex.quote(part) for part in arguments) or "-n 2"
    if interp.version == STRICT_ON:
        strict = ["error::DeprecationWarning"]
        strict += [f"ignore::DeprecationWarning:{module}" for module in THIRD_PARTY_DEPRECATIONS]
        pytest = " ".join(f"-W {shlex.quote(spec)}" for spec in strict) + " " + pytest
    command = f"{interp.python} -m pytest -q -rfE --junitxml={shlex.quote(str(report))} {pytest}"
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with log.open("a") as out:
        try:
            status = subprocess.run(
                inside(interp, command),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment,
                timeout=SUITE_TIMEOUT,
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\ntimed out after {SUITE_TIMEOUT} s\n")
            status = 124
    return Outcome(
        interp.version, status, *counts(report), seconds=time.monotonic() - started, log=log
    )


def needs_root(interpreters: list[Interpreter]) -> list[str]:
    return [interp.version for interp in interpreters if interp.prefix]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="e.g. 3.13 3.14")
    parser.add_argument("--prerelease", action="append", default=[], metavar="VERSION")
    parser.add_argument("--exec", dest="command", metavar="VERSION", help="run a command")
    arguments, rest = argv, []
    if "--" in argv:
        split = argv.index("--")
        arguments, rest = argv[:split], argv[split + 1 :]
    options = parser.parse_args(arguments)
    versions = [options.command] if options.command else options.versions + options.prerelease
    if not versions:
        parser.error("name at least one version")
    interpreters = [interpreter(version) for version in versions]
    if rooted := needs_root(interpreters):
        build_root(rooted)
    with mounted() if rooted else contextlib.nullcontext():
        if options.command:
            interp = interpreters[0]
            logs = CHECKOUT / ".pythons"
            logs.mkdir(exist_ok=True)
            prepare(interp, logs / f"{interp.version}.log")
            bin_dir = shlex.quote(str(interp.environment / "bin"))
            command = " ".join(shlex.quote(part) for part in rest)
            return subprocess.run(inside(interp, f"PATH={bin_dir}:$PATH {command}")).returncode
        with concurrent.futures.ThreadPoolExecutor(len(interpreters)) as pool:
            outcomes = list(pool.map(lambda interp: suite(interp, rest), interpreters))
    print("\n| Python | result | passed | failed | skipped | seconds |\n|---|---|---|---|---|---|")
    for outcome in outcomes:
        verdict = {0: "passed", 5: "no tests"}.get(outcome.status, f"exit {outcome.status}")
        print(
            f"| {outcome.version} | {verdict} | {outcome.passed} | {outcome.failed} | "
            f"{outcome.skipped} | {outcome.seconds:.0f} |"
        )
    broken = []
    for outcome in outcomes:
        if outcome.status in (0, 5) or outcome.log is None:
            continue
        lines = outcome.log.read_text().splitlines()
        if outcome.version in options.prerelease:
            # Reported, never failing: what failed, by name.
            print(f"\n--- {outcome.version} (pre-release): what failed")
            print("\n".join([line for line in lines if line.startswith(("FAILED", "ERROR"))][:60]))
            continue
        print(f"\n--- {outcome.version}: last lines")
        print("\n".join(lines[-40:]))
        broken.append(outcome.version)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
