"""pytest plugin: ``@pytest.mark.agenttape`` gives a test its own cassette.

Options: ``--agenttape-mode`` (default ``none``: replay only, CI never records unless told),
``--agenttape-record`` (mode ``all`` for the tests that run) and ``--agenttape-on-unused``.
A test that fails because a request had no recording shows the request and the nearest
recorded candidates with their differences, not a traceback through HTTP library internals.

Where pytest-recording is not active, ``recording_plugin`` serves its interface, so a suite
written for it runs unchanged; only a suite that uses that interface gets it
(``recording_switch``).

Under pytest-xdist every test runs in one worker and, by default, has a cassette of its own;
tests that name the same cassette take an exclusive lock on it while they record, so two
workers never read-modify-write one file at the same time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import stat
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._core.errors import AgentTapeError, CassetteNotFoundError
from .._core.options import (
    MODE_ENVIRONMENT_VARIABLE,
    MODE_METAVAR,
    ON_UNUSED,
    environment_mode,
    mode_argument,
)
from . import markers, orphans, recording_switch

if TYPE_CHECKING:
    from .._core.cassette import Cassette

_CASSETTE = pytest.StashKey["Cassette"]()
_FAILED = pytest.StashKey[bool]()
_RUN_ID = pytest.StashKey[str]()
_SAFE = re.compile(r"[^A-Za-z0-9_.\-\[\]=,+]")
_MAX_NAME = 120


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser
) -> Iterator[None]:
    """pytest-recording's options are added once the project's conftests added theirs: each
    one the project defines itself stays the project's."""
    yield
    recording_switch.offer(early_config, parser)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("agenttape", "agenttape cassettes")
    group.addoption(
        "--agenttape-mode",
        type=mode_argument,
        metavar=MODE_METAVAR,
        default=None,
        help="mode of @pytest.mark.agenttape cassettes (default: the marker's, else none; "
        "record is all)",
    )
    group.addoption(
        "--agenttape-record",
        action="store_true",
        default=False,
        help="re-record the cassettes of the tests that run (mode all)",
    )
    group.addoption(
        "--agenttape-on-unused",
        choices=ON_UNUSED,
        default=None,
        help="what a recorded interaction the test never played does (default: ignore)",
    )
    orphans.add_option(group)
    parser.addini(
        "agenttape_max_age",
        "how old a cassette may be (90d; s, m, h, d, w, y) before on_expired applies; "
        "a marker's max_age= wins",
        default="",
    )
    parser.addini(
        "agenttape_on_expired",
        "what an older cassette does: warn (default), fail, or rerecord (when the network "
        "and keys are there)",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RUN_ID] = uuid.uuid4().hex
    if recording_switch.configure(config):
        from . import recording_plugin

        config.pluginmanager.register(recording_plugin, recording_switch.NAME)
    if config.getoption("agenttape_orphans"):
        config.pluginmanager.register(
            orphans.Orphans(config, used_cassette, replayed), "agenttape-orphans"
        )
    config.addinivalue_line(
        "markers",
        "agenttape(path=None, **options): run the test under a cassette "
        "(default cassettes/<test module>/<test name>.msgpack beside the test file); "
        "options are those of agenttape.use_cassette",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markers.check_spelling(config, items)
    recording_switch.switch_on(config, items)


def cassette_name(item: pytest.Item) -> str:
    """A file name for a test: readable, distinct per parametrization, safe on every OS."""
    name = ".".join(item.nodeid.split("::")[1:]) or item.name
    safe = _SAFE.sub("_", name).rstrip(". ")
    if safe != name or len(safe) > _MAX_NAME:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[:_MAX_NAME]}-{digest}"
    return safe


def default_path(item: pytest.Item) -> Path:
    return item.path.parent / "cassettes" / item.path.stem / f"{cassette_name(item)}.msgpack"


def _lock_directory() -> Path:
    """The directory of the lock files: this user's own, in the temporary directory every
    xdist worker shares. Anyone may create names there, so one planted under this name (a
    link, or another user's directory) is refused; this user's own is made private (0700)."""
    user = os.getuid()
    directory = Path(tempfile.gettempdir()) / f"agenttape-locks-{user}"
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (a symbolic link?)"
    elif info.st_uid != user:
        problem = f"belongs to user {info.st_uid}"
    else:
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(directory, 0o700)
        return directory
    pytest.fail(
        f"agenttape: the lock directory {directory} {problem}; remove it and run again",
        pytrace=False,
    )


def _open_lock(lock: Path) -> int:
    """The lock file, opened for reading and writing: never through a link, and only a
    plain file of this user with no other name. Anything else found under its name (left
    when the directory was open to others) is removed and the file made anew."""
    for _attempt in range(2):
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if not os.path.islink(lock):
                pytest.fail(f"agenttape: cannot open the lock file {lock}: {exc}", pytrace=False)
        else:
            info = os.fstat(descriptor)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_nlink == 1:
                return descriptor
            os.close(descriptor)
        os.unlink(lock)
    pytest.fail(f"agenttape: cannot make the lock file {lock} anew", pytrace=False)


@contextlib.contextmanager
def _exclusive(path: Path, run_id: str) -> Iterator[bool]:
    """Hold an inter-process lock on one cassette path; yields True for the first test of
    this run (across xdist workers) to hold it. The lock file remembers the last run id.
    Where fcntl does not exist there is no lock and every test counts as first."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    descriptor = _open_lock(_lock_directory() / f"{digest}.lock")
    with os.fdopen(descriptor, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            first = handle.read() != run_id
            if first:
                handle.seek(0)
                handle.truncate()
                handle.write(run_id)
                handle.flush()
            yield first
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _options(item: pytest.Item) -> tuple[Path, dict[str, Any]]:
    marker = item.get_closest_marker("agenttape")
    args: tuple[Any, ...] = marker.args if marker is not None else ()
    options = dict(marker.kwargs) if marker is not None else {}
    if len(args) > 1:
        pytest.fail("@pytest.mark.agenttape takes one positional argument, the path", pytrace=False)
    given = args[0] if args else options.pop("path", None)
    if given is None:
        path = default_path(item)
    else:
        path = Path(os.fspath(given))
        path = path if path.is_absolute() else item.path.parent / path
    config = item.config
    if config.getoption("agenttape_record"):
        options["mode"] = "all"
    elif config.getoption("agenttape_mode"):
        options["mode"] = config.getoption("agenttape_mode")
    if config.getoption("agenttape_on_unused"):
        options["on_unused"] = config.getoption("agenttape_on_unused")
    for name in ("max_age", "on_expired"):
        ini = config.getini(f"agenttape_{name}")
        if ini and name not in options:
            options[name] = ini
    return path, options


def used_cassette(item: pytest.Item) -> Path | None:
    """The cassette a collected test uses (its marker's, or the default one of the
    ``agenttape_cassette`` fixture); None when it has none, or a marker that is wrong."""
    fixtures = getattr(item, "fixturenames", ())
    if item.get_closest_marker("agenttape") is None and "agenttape_cassette" not in fixtures:
        return None
    try:
        return _options(item)[0]
    except pytest.fail.Exception:
        return None


def replayed(item: pytest.Item) -> tuple[Path, list[int]] | None:
    """The cassette a test replayed and how often each interaction was played; None when
    the test recorded, or had no cassette."""
    cassette = item.stash.get(_CASSETTE, None)
    if cassette is None or cassette.is_recording:
        return None
    return cassette.path, list(cassette.queue.play_counts)


def _run_id(config: pytest.Config) -> str:
    """One id for this test run, the same in every xdist worker. Read from the worker's own
    input, not the environment, which a pytest started from inside a worker inherits."""
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict) and workerinput.get("testrunuid"):
        return str(workerinput["testrunuid"])
    return config.stash[_RUN_ID]


@pytest.fixture
def agenttape_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """The cassette active for this test (from its ``agenttape`` marker, or the defaults)."""
    from .._core.cassette import Cassette  # imported by the first test that has one

    item = request.node
    assert isinstance(item, pytest.Item)
    path, options = _options(item)
    try:
        cassette = Cassette(path, **options)
    except (TypeError, ValueError) as exc:
        pytest.fail(f"@pytest.mark.agenttape: {exc}", pytrace=False)
    try:
        override = environment_mode()
    except ValueError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:
        pytest.fail(problem, pytrace=False)
    mode = override or cassette.mode
    if mode == "none":
        lock: contextlib.AbstractContextManager[bool] = contextlib.nullcontext(True)
    else:
        lock = _exclusive(path, _run_id(item.config))
    with lock as first:
        if mode == "all" and not first and MODE_ENVIRONMENT_VARIABLE not in os.environ:
            # Another test of this run re-recorded this shared cassette already: add to it
            # rather than throw its recording away.
            cassette = Cassette.from_options(
                path, dataclasses.replace(cassette.options, mode="new_episodes")
            )
        cassette.__enter__()
        item.stash[_CASSETTE] = cassette
        try:
            yield cassette
        finally:
            cassette.stop(failed=item.stash.get(_FAILED, False))


@pytest.fixture(autouse=True)
def _agenttape_marker(request: pytest.FixtureRequest) -> None:
    """Autouse, so the cassette is active before the test's other fixtures set up; the one
    fixture agenttape adds to every test, and it asks for nothing unless the test is marked."""
    if request.node.get_closest_marker("agenttape") is not None:
        request.getfixturevalue("agenttape_cassette")
    if recording_switch.engaged(request):
        request.getfixturevalue(recording_switch.ENGINE)


def _agenttape_error(error: BaseException | None) -> AgentTapeError | None:
    """The agenttape error behind ``error``, also when a library re-raised it as its own
    (an SDK turns it into a connection error)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, AgentTapeError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _where(item: pytest.Item, call: pytest.CallInfo[None]) -> str:
    if call.excinfo is None:
        return ""
    for entry in reversed(call.excinfo.traceback):
        if Path(str(entry.path)) == item.path:
            return f"{item.path.name}:{entry.lineno + 1}: {str(entry.statement).strip()}"
    return ""


def _concise(item: pytest.Item, call: pytest.CallInfo[None], error: AgentTapeError) -> str:
    lines = [str(error)]
    if isinstance(error, CassetteNotFoundError):
        lines.append(
            "With pytest: --agenttape-mode=once records it (--agenttape-record re-records)."
        )
    assert call.excinfo is not None
    raised = call.excinfo.value
    where = _where(item, call)
    surfaced = ""
    if raised is not error:
        summary = (str(raised).splitlines() or [""])[0][:120]
        name = f"{type(raised).__module__}.{type(raised).__qualname__}"
        surfaced = f" and surfaced as {name}" + (f" ({summary})" if summary else "")
    lines.append(f"\n{type(error).__name__} raised{surfaced}" + (f" at {where}" if where else ""))
    return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    cassette = item.stash.get(_CASSETTE, None)
    if cassette is not None and call.excinfo is not None:
        cassette.note_faults(call.excinfo.value)  # before the report shows the exception
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    if call.when == "call":
        item.stash[_FAILED] = True
    error = _agenttape_error(call.excinfo.value if call.excinfo is not None else None)
    if error is not None:
        report.longrepr = _concise(item, call, error)
        return
    cassette = item.stash.get(_CASSETTE, None)
    if cassette is not None and cassette.misses:
        text = "\n\n".join(str(miss) for miss in cassette.misses)
        report.sections.append(("agenttape: requests with no recording", text))
