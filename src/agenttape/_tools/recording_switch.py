"""Where agenttape's drop-in for pytest-recording switches on: in a suite that uses that
interface, and never over a name the project defines itself.

Where pytest-recording is not active, pytest-recording's options are added once the project's
initial conftests have added theirs, each only where nothing took its name or destination
already (a project's own ``--block-network`` stays the project's). It acts once the collected
tests show the suite uses the interface: a ``vcr``, ``block_network``, ``default_cassette`` or
``allowed_hosts`` marker; one of its fixtures requested that the project does not define; a ``vcr_config`` fixture or a
``pytest_recording_configure`` hook defined; or one of its options given. Its fixtures are
registered before the conftests' (so that a project's own ``vcr`` or ``vcr_config`` wins), none
of them autouse: in a project that uses none of the interface nothing of it runs, and what it
needs (vcrpy, the tape, the network block) is never imported.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

NAME = "agenttape.recording"
"""The name the drop-in is registered under with pytest's plugin manager."""

ENGINE = "_agenttape_recording"
"""The drop-in's fixture doing what pytest-recording's autouse fixtures do, for the tests that
need it (a ``vcr`` or ``block_network`` marker, or ``--block-network``)."""

RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")
IGNORE_JSON_FIELDS = "agenttape_ignore_json_fields"

_RECORDING_PLUGINS = ("recording", "pytest_recording.plugin", "cassetter")
"""The names of the plugins that serve pytest-recording's interface themselves:
pytest-recording (as an entry point, or named in a conftest's ``pytest_plugins``), and
cassetter, which replaces it."""

_MARKERS = {
    "vcr": "Mark the test as using VCR.py.",
    "block_network": "Block network access except for VCR recording.",
    "default_cassette": "Override the default cassette name.",
    "allowed_hosts": "List of hosts to where connection must be allowed.",
}

_FIXTURES = frozenset(
    {
        "vcr",
        "vcr_config",
        "vcr_cassette_dir",
        "default_cassette_name",
        "record_mode",
        "vcr_markers",
        "disable_recording",
    }
)

# dest -> (option, its argparse attributes)
_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "record_mode": (
        "--record-mode",
        {
            "action": "store",
            "default": None,
            "choices": RECORD_MODES,
            "help": 'VCR.py record mode. Default to "none".',
        },
    ),
    "block_network": (
        "--block-network",
        {
            "action": "store_true",
            "default": False,
            "help": "Block network access except for VCR recording.",
        },
    ),
    "allowed_hosts": (
        "--allowed-hosts",
        {
            "action": "store",
            "default": None,
            "help": "Hosts, separated by comma, to where connection must be allowed.",
        },
    ),
    "disable_recording": (
        "--disable-recording",
        {"action": "store_true", "default": False, "help": "Disable VCR.py integration."},
    ),
}

_OFFERED = pytest.StashKey[frozenset[str]]()  # the dests of the options the drop-in added
_ON = pytest.StashKey[bool]()


def recording_active(pluginmanager: pytest.PytestPluginManager) -> bool:
    """Whether another plugin serves pytest-recording's interface in this run."""
    return any(pluginmanager.has_plugin(name) for name in _RECORDING_PLUGINS)


def _taken(parser: pytest.Parser, option: str, dest: str) -> bool:
    """Whether a plugin or conftest already defines ``option``, or another option with the
    destination ``dest``."""
    try:
        known, unknown = parser.parse_known_and_unknown_args([option])
    except pytest.UsageError:  # defined, and it takes a value
        return True
    return option not in unknown or hasattr(known, dest)


def offer(config: pytest.Config, parser: pytest.Parser) -> None:
    """After the initial conftests: pytest-recording's hook and the options nobody defines,
    where no other plugin serves its interface."""
    from . import recording_hooks
    from .drift import DRIFT_MODES

    manager = config.pluginmanager
    if recording_active(manager):
        return
    manager.add_hookspecs(recording_hooks)
    group = parser.getgroup("recording")
    added = []
    for dest, (option, attributes) in _OPTIONS.items():
        if not _taken(parser, option, dest):
            group.addoption(option, dest=dest, **attributes)
            added.append(dest)
    config.stash[_OFFERED] = frozenset(added)
    parser.getgroup("agenttape").addoption(
        "--agenttape-drift",
        choices=DRIFT_MODES,
        default="report",
        help="requests that changed since their vcrpy cassette was recorded: report them at "
        "the end of the session (default), fail the test, or say nothing",
    )
    parser.addini(
        IGNORE_JSON_FIELDS,
        type="linelist",
        default=[],
        help="JSON paths (a.b, items[*].id) the drift report leaves out of the request bodies "
        "it compares: ids and times the code draws anew on each run",
    )


def offered(config: pytest.Config) -> bool:
    return _OFFERED in config.stash


def configure(config: pytest.Config) -> bool:
    """The markers (a suite with ``--strict-markers`` imports its tests before it is known
    whether they use them), the check of the ini setting, and the drift summary (the summary
    is written where the reports arrive: under xdist, in the controller, which collects
    nothing). Whether the drop-in is offered: its fixtures are then registered, before the
    conftests' (``pytest_plugin``)."""
    if not offered(config):
        return False
    from .drift import DriftReport

    for name, text in _MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    ignored = config.getini(IGNORE_JSON_FIELDS)
    if ignored:  # the matching is loaded to check them, not for a suite that sets none
        from .._core.matching.matcher import Matcher

        try:
            Matcher(ignore_json_fields=ignored)
        except ValueError as error:
            raise pytest.UsageError(f"{IGNORE_JSON_FIELDS}: {error}") from None
    config.pluginmanager.register(
        DriftReport(config.getoption("agenttape_drift")), "agenttape-drift"
    )
    return True


def option(config: pytest.Config, dest: str) -> Any:
    """The value of one of pytest-recording's options as the drop-in added it; its default
    where the project defines that option itself (the project's, not the drop-in's)."""
    if dest in config.stash.get(_OFFERED, frozenset()):
        return config.getoption(dest)
    return _OPTIONS[dest][1]["default"]


def _given(config: pytest.Config) -> bool:
    return any(option(config, dest) != _OPTIONS[dest][1]["default"] for dest in _OPTIONS)


def _defines(holders: list[Any], name: str) -> bool:
    return any(name in vars(holder) for holder in holders if holder is not None)


def _uses(config: pytest.Config, items: list[pytest.Item]) -> bool:
    """Whether the suite uses pytest-recording's interface (see the module's docstring)."""
    if _given(config) or config.pluginmanager.hook.pytest_recording_configure.get_hookimpls():
        return True
    modules = [
        plugin
        for plugin in config.pluginmanager.get_plugins()
        if isinstance(plugin, types.ModuleType)
    ]
    if _defines(modules, "vcr_config"):
        return True
    for item in items:
        if any(item.get_closest_marker(name) is not None for name in _MARKERS):
            return True
        local = [getattr(item, "module", None), getattr(item, "cls", None)]
        if _defines(local, "vcr_config"):
            return True
        requested = _FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if any(not _defines([*modules, *local], name) for name in requested):
            return True
    return False


def switch_on(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Switches the drop-in on where the collected suite uses the interface."""
    if offered(config) and not config.stash.get(_ON, False) and _uses(config, items):
        config.stash[_ON] = True


def engaged(request: pytest.FixtureRequest) -> bool:
    """Whether the drop-in acts in this test: it is on, and the test is marked ``vcr`` or
    ``block_network`` or runs under ``--block-network``."""
    if not request.config.stash.get(_ON, False):
        return False
    node = request.node
    marked = any(node.get_closest_marker(name) is not None for name in ("vcr", "block_network"))
    return marked or bool(option(request.config, "block_network"))
