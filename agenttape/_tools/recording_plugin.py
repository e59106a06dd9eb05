"""pytest-recording's interface, served by agenttape where pytest-recording is not active: a
suite written for it (``@pytest.mark.vcr``, ``vcr_config``, a conftest's
``pytest_recording_configure``, YAML or JSON cassettes) runs unchanged, its cassettes read
where and as pytest-recording reads them and replayed by agenttape.

Registered by ``pytest_plugin`` only when pytest-recording is not installed or is disabled
(``-p no:recording``): ``pytest_plugin`` adds the options and the hook, and registers this
module at configure time. Names, defaults and precedence follow pytest-recording 0.13's.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .._adapters.network_guard import REGEX_PREFIX
from .._core.matching import Matcher
from .drift import DRIFT_MODES, DriftReport, changed_requests, drift_text
from .network_block import NetworkBlock
from .vcr_cache import deserialize_cached
from .vcr_tape import VcrTape, msgpack_path

NAME = "agenttape.recording"
RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")
_TAPE = pytest.StashKey[VcrTape]()
_DRIFT = "agenttape-drift"
_IGNORE_JSON_FIELDS = "agenttape_ignore_json_fields"

try:
    MAX_FILENAME_LEN = os.pathconf(".", "PC_NAME_MAX")
except (AttributeError, ValueError, OSError):
    MAX_FILENAME_LEN = 255


def add_options(parser: pytest.Parser) -> None:
    """pytest-recording's options, and agenttape's for the drift report."""
    group = parser.getgroup("recording")
    group.addoption(
        "--record-mode",
        action="store",
        default=None,
        choices=RECORD_MODES,
        help='VCR.py record mode. Default to "none".',
    )
    group.addoption(
        "--block-network",
        action="store_true",
        default=False,
        help="Block network access except for VCR recording.",
    )
    group.addoption(
        "--allowed-hosts",
        action="store",
        default=None,
        help="Hosts, separated by comma, to where connection must be allowed.",
    )
    group.addoption(
        "--disable-recording",
        action="store_true",
        default=False,
        help="Disable VCR.py integration.",
    )
    parser.getgroup("agenttape").addoption(
        "--agenttape-drift",
        choices=DRIFT_MODES,
        default="report",
        help="requests that changed since their vcrpy cassette was recorded: report them at "
        "the end of the session (default), fail the test, or say nothing",
    )
    parser.addini(
        _IGNORE_JSON_FIELDS,
        type="linelist",
        default=[],
        help="JSON paths (a.b, items[*].id) the drift report leaves out of the request bodies "
        "it compares: ids and times the code draws anew on each run",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vcr: Mark the test as using VCR.py.")
    config.addinivalue_line(
        "markers", "block_network: Block network access except for VCR recording."
    )
    config.addinivalue_line("markers", "default_cassette: Override the default cassette name.")
    config.addinivalue_line(
        "markers", "allowed_hosts: List of hosts to where connection must be allowed."
    )
    try:
        Matcher(ignore_json_fields=config.getini(_IGNORE_JSON_FIELDS))
    except ValueError as error:
        raise pytest.UsageError(f"{_IGNORE_JSON_FIELDS}: {error}") from None
    config.pluginmanager.register(DriftReport(config.getoption("agenttape_drift")), _DRIFT)


@pytest.fixture(scope="session")
def record_mode(request: pytest.FixtureRequest) -> str:
    """The record mode given on the command line, else ``none``."""
    return str(request.config.getoption("--record-mode") or "none")


@pytest.fixture(scope="session")
def disable_recording(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--disable-recording"))


@pytest.fixture
def vcr_config() -> dict[str, Any]:
    """A shareable configuration for each test's cassette; a project overrides it."""
    return {}


@pytest.fixture
def allowed_hosts(request: pytest.FixtureRequest) -> list[str] | None:
    """Hosts a blocked network still reaches: the marker's, else the option's, else
    ``vcr_config``'s."""
    marker = request.node.get_closest_marker(name="block_network")
    config = request.getfixturevalue("vcr_config")
    hosts = (
        getattr(marker, "kwargs", {}).get("allowed_hosts")
        or request.config.getoption("--allowed-hosts")
        or config.get("allowed_hosts")
    )
    if isinstance(hosts, str):
        hosts = hosts.split(",")
    return hosts  # type: ignore[no-any-return]


@pytest.fixture
def vcr_markers(request: pytest.FixtureRequest) -> list[pytest.Mark]:
    return list(request.node.iter_markers(name="vcr"))


def as_patterns(hosts: list[str] | None) -> tuple[str, ...]:
    """pytest-recording's allowed hosts, each a regular expression matched from the start of
    the host, as agenttape's network guard takes them."""
    patterns = tuple(hosts or ())
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise pytest.UsageError(
                f"allowed_hosts: {pattern!r} is not a regular expression: {exc}"
            ) from None
    return tuple(REGEX_PREFIX + pattern for pattern in patterns)


def merge_kwargs(config: dict[str, Any], markers: list[pytest.Mark]) -> dict[str, Any]:
    """``vcr_config`` with the markers' keywords over it, the closest marker last."""
    kwargs = copy.deepcopy(config)
    for marker in reversed(markers):
        kwargs.update(marker.kwargs)
    return kwargs


def _blocks(request: pytest.FixtureRequest, record_mode: str, markers: list[pytest.Mark]) -> bool:
    marker = request.node.get_closest_marker(name="block_network")
    if marker is not None and (marker.args or set(marker.kwargs) - {"allowed_hosts"}):
        raise pytest.UsageError(
            "Invalid arguments to `block_network`. It accepts only the following keyword "
            f"arguments: `allowed_hosts`. Got args: {marker.args!r}; kwargs: {marker.kwargs!r}"
        )
    if markers and request.config.getoption("--record-mode") is None:
        merged = merge_kwargs(request.getfixturevalue("vcr_config"), markers)
        record_mode = merged.get("record_mode", "none")
    wanted = marker is not None or bool(request.config.getoption("--block-network"))
    return wanted and (not markers or record_mode == "none")


@pytest.fixture(autouse=True)
def block_network(
    request: pytest.FixtureRequest, record_mode: str, vcr_markers: list[pytest.Mark]
) -> Iterator[None]:
    """Network access blocked in a test marked ``block_network`` (or under
    ``--block-network``) except where a cassette records; a test with a cassette has its
    tape block instead."""
    if vcr_markers or not _blocks(request, record_mode, vcr_markers):
        yield
        return
    hosts = as_patterns(request.getfixturevalue("allowed_hosts"))
    with NetworkBlock(Path(str(request.node.path)), hosts):
        yield


@pytest.fixture(autouse=True)
def vcr(
    request: pytest.FixtureRequest,
    vcr_markers: list[pytest.Mark],
    vcr_cassette_dir: str,
    record_mode: str,
    disable_recording: bool,
    pytestconfig: pytest.Config,
) -> Iterator[Any]:
    """The test's cassette (vcrpy's ``Cassette``, served by agenttape) when it is marked
    ``vcr``; else None."""
    if disable_recording or not vcr_markers:
        yield None
        return
    tape = open_tape(request, vcr_markers, vcr_cassette_dir, record_mode, pytestconfig)
    item = request.node
    tape.start()
    item.stash[_TAPE] = tape
    try:
        yield tape.vcr
    finally:
        tape.stop()


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """Each test module has its cassettes in ``cassettes/<module name>`` beside it."""
    module = Path(str(request.node.path))
    return os.path.join(module.parent, "cassettes", module.stem)


@pytest.fixture
def default_cassette_name(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("default_cassette")
    if marker is not None:
        assert marker.args, (
            "You should pass the cassette name as an argument to the "
            "`pytest.mark.default_cassette` marker"
        )
        return str(marker.args[0])
    return get_default_cassette_name(request.cls, request.node.name)


def get_default_cassette_name(test_class: Any, test_name: str) -> str:
    name = f"{test_class.__name__}.{test_name}" if test_class else test_name
    for character in r"<>?%*:|\"'/\\":
        name = name.replace(character, "-")
    return name


def open_tape(
    request: pytest.FixtureRequest,
    markers: list[pytest.Mark],
    cassette_dir: str,
    record_mode: str,
    pytestconfig: pytest.Config,
) -> VcrTape:
    """The test's tape, configured as pytest-recording configures vcrpy: ``vcr_config``
    under the markers' keywords, the conftest's hook called with the ``VCR``."""
    try:
        from vcr import VCR
        from vcr.cassette import Cassette
    except ImportError:
        pytest.fail(
            "@pytest.mark.vcr: reading vcrpy cassettes needs vcrpy: pip install vcrpy",
            pytrace=False,
        )
    merged = merge_kwargs(request.getfixturevalue("vcr_config"), markers)
    name = request.getfixturevalue("default_cassette_name")
    suffix = "." + str(merged.get("serializer", "yaml"))
    if len(name) + len(suffix) > MAX_FILENAME_LEN:
        digest = hashlib.md5(name.encode()).hexdigest()
        name = f"{name[: MAX_FILENAME_LEN - len(suffix) - len(digest) - 3]}...{digest}"
    record_mode = merged.get("record_mode", record_mode)
    path_transformer = VCR.ensure_suffix(suffix)
    if record_mode == "rewrite":
        old = Path(path_transformer(os.path.join(cassette_dir, name)))
        for path in (old, msgpack_path(old, suffix)):
            path.unlink(missing_ok=True)
        record_mode = "new_episodes"
        if "record_mode" in merged:
            merged["record_mode"] = record_mode
    vcr = VCR(
        path_transformer=path_transformer,
        cassette_library_dir=cassette_dir,
        record_mode=record_mode,
    )
    extras = [
        path if os.path.isabs(path) else os.path.join(cassette_dir, path)
        for marker in markers
        for path in marker.args
    ]
    vcr.register_persister(combined_persister(extras))
    pytestconfig.hook.pytest_recording_configure(config=pytestconfig, vcr=vcr)
    config = vcr.get_merged_config(path=name, **merged)
    transformer = config.pop("path_transformer", None)
    for key in ("func_path_generator", "record_on_exception"):
        config.pop(key, None)
    if transformer:
        config["path"] = transformer(config["path"])
    drift = pytestconfig.getoption("agenttape_drift") != "off"
    ignored = tuple(pytestconfig.getini(_IGNORE_JSON_FIELDS))
    blocks = _blocks(request, record_mode, markers)
    hosts = as_patterns(request.getfixturevalue("allowed_hosts")) if blocks else ()
    return VcrTape(
        Cassette(**config),
        suffix=suffix,
        record_mode=str(config["record_mode"].value),
        drift=drift,
        ignore_json_fields=ignored,
        block_network=blocks,
        allowed_hosts=hosts,
    )


def combined_persister(extra_paths: list[str]) -> Any:
    """pytest-recording's persister: the test's cassette and the extra ones a marker names
    (``@pytest.mark.vcr("shared.yaml")``) read as one, each held to import-vcr's bounds and
    parsed once (``vcr_cache``)."""
    from vcr.persisters.filesystem import CassetteNotFoundError, FilesystemPersister

    class CombinedPersister(FilesystemPersister):  # type: ignore[misc]
        @classmethod
        def load_cassette(cls, cassette_path: str, serializer: Any) -> tuple[list[Any], ...]:
            requests: list[Any] = []
            responses: list[Any] = []
            for path in dict.fromkeys([os.fspath(cassette_path), *extra_paths]):
                try:
                    with open(path, encoding="utf8") as handle:
                        content = handle.read()
                except OSError:
                    continue
                loaded = deserialize_cached(content, serializer, path)
                requests.extend(loaded[0])
                responses.extend(loaded[1])
            if not requests:
                raise CassetteNotFoundError("No cassettes found.")
            return requests, responses

    return CombinedPersister


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    tape = item.stash.get(_TAPE, None)
    if tape is None or not tape.drifts:
        return
    cassette = tape.vcr_path
    with contextlib.suppress(ValueError):
        cassette = cassette.relative_to(item.config.rootpath)
    drifts = [drift.as_list() for drift in tape.drifts]
    failing = item.config.getoption("agenttape_drift") == "fail" and changed_requests(drifts)
    if call.when == "call" and report.passed and failing:
        report.outcome = "failed"
        report.longrepr = drift_text(item.nodeid, str(cassette), drifts)
        report.agenttape_drift_failed = True  # type: ignore[attr-defined]
    if call.when == "teardown":
        report.agenttape_drift = {  # type: ignore[attr-defined]
            "cassette": str(cassette),
            "drifts": drifts,
        }
