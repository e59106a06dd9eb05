"""pytest-recording's interface, served by agenttape where pytest-recording is not active: a
suite written for it (``@pytest.mark.vcr``, ``vcr_config``, a conftest's
``pytest_recording_configure``, YAML or JSON cassettes) runs unchanged, its cassettes read
where and as pytest-recording reads them and replayed by agenttape.

Registered by ``recording_switch`` only where pytest-recording is not active (not installed, or
``-p no:recording``) and the collected suite uses its interface; ``recording_switch`` adds the
options and the hook. Its fixtures are never autouse: ``pytest_plugin``'s one autouse fixture
asks for ``ENGINE`` in the tests that need it. Names, defaults and precedence follow
pytest-recording 0.13's.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .recording_switch import ENGINE, IGNORE_JSON_FIELDS, option

if TYPE_CHECKING:
    from .vcr_tape import VcrTape

# What a suite that uses the interface needs (the tape, vcrpy, the network block) is
# imported by its first test that does: registered in every project, this module costs
# the others nothing.

_TAPE = pytest.StashKey["VcrTape"]()

try:
    MAX_FILENAME_LEN = os.pathconf(".", "PC_NAME_MAX")
except (AttributeError, ValueError, OSError):
    MAX_FILENAME_LEN = 255


@pytest.fixture(scope="session")
def record_mode(request: pytest.FixtureRequest) -> str:
    """The record mode given on the command line, else ``none``."""
    return str(option(request.config, "record_mode") or "none")


@pytest.fixture(scope="session")
def disable_recording(request: pytest.FixtureRequest) -> bool:
    return bool(option(request.config, "disable_recording"))


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
        or option(request.config, "allowed_hosts")
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
    from .._adapters.network_guard import REGEX_PREFIX

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
    if markers and option(request.config, "record_mode") is None:
        merged = merge_kwargs(request.getfixturevalue("vcr_config"), markers)
        record_mode = merged.get("record_mode", "none")
    if request.node.get_closest_marker("agenttape") is not None:
        return False  # its own cassette keeps it off the network, or records it as asked
    wanted = marker is not None or bool(option(request.config, "block_network"))
    return wanted and (not markers or record_mode == "none")


@pytest.fixture(name=ENGINE)
def recording(
    request: pytest.FixtureRequest,
    vcr_markers: list[pytest.Mark],
    record_mode: str,
    disable_recording: bool,
    pytestconfig: pytest.Config,
) -> Iterator[Any]:
    """What pytest-recording's autouse fixtures do, for a test marked ``vcr`` or
    ``block_network`` (or under ``--block-network``): the test's cassette (vcrpy's
    ``Cassette``, served by agenttape) when it is marked ``vcr``; else the network blocked
    where asked, and None. A test with a cassette has its tape block the network instead."""
    if not vcr_markers:
        if _blocks(request, record_mode, vcr_markers):
            from .network_block import NetworkBlock

            hosts = as_patterns(request.getfixturevalue("allowed_hosts"))
            with NetworkBlock(Path(str(request.node.path)), hosts):
                yield None
        else:
            yield None
        return
    if disable_recording:
        yield None
        return
    cassette_dir = request.getfixturevalue("vcr_cassette_dir")
    tape = open_tape(request, vcr_markers, cassette_dir, record_mode, pytestconfig)
    item = request.node
    tape.start()
    item.stash[_TAPE] = tape
    try:
        yield tape.vcr
    finally:
        tape.stop()


@pytest.fixture
def vcr(request: pytest.FixtureRequest) -> Any:
    """The test's cassette (vcrpy's ``Cassette``, served by agenttape) when it is marked
    ``vcr``; else None. Not autouse: a test marked ``vcr`` has its cassette whether it asks
    for this fixture or not."""
    return request.getfixturevalue(ENGINE)


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
    from .vcr_tape import VcrTape

    try:
        from vcr import VCR
        from vcr.cassette import Cassette
        from vcr.record_mode import RecordMode
    except ImportError:
        pytest.fail(
            "@pytest.mark.vcr: reading vcrpy cassettes needs vcrpy: pip install vcrpy",
            pytrace=False,
        )
    merged = merge_kwargs(request.getfixturevalue("vcr_config"), markers)
    suffix = "." + str(merged.get("serializer", "yaml"))
    name = _cassette_name(request.getfixturevalue("default_cassette_name"), suffix)
    record_mode = merged.get("record_mode", record_mode)
    path_transformer = VCR.ensure_suffix(suffix)
    if record_mode == "rewrite":
        old = Path(path_transformer(os.path.join(cassette_dir, name)))
        record_mode = _rewritten(merged, old, suffix)
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
    config = _cassette_config(vcr, name, merged)
    blocks = _blocks(request, record_mode, markers)
    return VcrTape(
        Cassette(**config),
        suffix=suffix,
        record_mode=RecordMode(config["record_mode"]).value,
        drift=pytestconfig.getoption("agenttape_drift") != "off",
        ignore_json_fields=tuple(pytestconfig.getini(IGNORE_JSON_FIELDS)),
        block_network=blocks,
        allowed_hosts=as_patterns(request.getfixturevalue("allowed_hosts")) if blocks else (),
    )


def _cassette_name(name: str, suffix: str) -> str:
    """The test's cassette name, shortened as pytest-recording shortens it (a digest at the
    end) when the file name would be too long for the file system."""
    if len(name) + len(suffix) > MAX_FILENAME_LEN:
        digest = hashlib.md5(name.encode()).hexdigest()
        name = f"{name[: MAX_FILENAME_LEN - len(suffix) - len(digest) - 3]}...{digest}"
    return name


def _rewritten(merged: dict[str, Any], old: Path, suffix: str) -> str:
    """``--record-mode=rewrite``: the old cassette (and its msgpack twin) deleted, then
    recorded as ``new_episodes``."""
    from .vcr_tape import msgpack_path

    for path in (old, msgpack_path(old, suffix)):
        path.unlink(missing_ok=True)
    if "record_mode" in merged:
        merged["record_mode"] = "new_episodes"
    return "new_episodes"


def _cassette_config(vcr: Any, name: str, merged: dict[str, Any]) -> dict[str, Any]:
    """The keywords of vcrpy's ``Cassette`` as the ``VCR`` merges them, its path transformed
    and the keywords the cassette itself does not take left out."""
    config: dict[str, Any] = vcr.get_merged_config(path=name, **merged)
    transformer = config.pop("path_transformer", None)
    for key in ("func_path_generator", "record_on_exception"):
        config.pop(key, None)
    if transformer:
        config["path"] = transformer(config["path"])
    return config


def combined_persister(extra_paths: list[str]) -> Any:
    """pytest-recording's persister: the test's cassette and the extra ones a marker names
    (``@pytest.mark.vcr("shared.yaml")``) read as one, each held to import-vcr's bounds and
    parsed once (``vcr_cache``)."""
    from vcr.persisters.filesystem import CassetteNotFoundError, FilesystemPersister

    from .vcr_cache import deserialize_cached

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
    from .drift import changed_requests, drift_text

    cassette = tape.read_from
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
