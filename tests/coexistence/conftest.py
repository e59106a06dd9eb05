"""The coexistence suite's own checks: the plugins the cell names are active (so a cell can
not pass without its plugin), the others are not, and blockbuster guards every async test
where the cell turns it on."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
from coexist import FEATURES

# Feature -> the name its pytest plugin registers under.
PLUGINS = {
    "inline-snapshot": "inline_snapshot",
    "randomly": "randomly",
    "rerunfailures": "rerunfailures",
    "syrupy": "syrupy",
    "socket": "socket",
    "time-machine": "time_machine",
    "xdist": "xdist",
    "asyncio": "asyncio",
    "anyio": "anyio",
    "cov": "pytest_cov",
    "timeout": "timeout",
    "hypothesis": "hypothesispytest",
    "recording": "recording",
}
DROP_IN = "agenttape.recording"

collect_ignore = [] if "asyncio-auto" in FEATURES else ["test_auto_mode.py"]


@pytest.hookimpl(trylast=True)  # after the plugins' own: agenttape registers its drop-in there
def pytest_configure(config: pytest.Config) -> None:
    assert FEATURES, "run by .ci/coexistence.py, which names the cell in AGENTTAPE_COEXIST"
    manager = config.pluginmanager
    manager.get_plugins()  # a set of every plugin object: each must be hashable
    for feature, name in PLUGINS.items():
        wanted = feature in FEATURES
        assert bool(manager.has_plugin(name)) == wanted, f"{name} active: expected {wanted}"
    # agenttape's drop-in serves pytest-recording's interface exactly where pytest-recording
    # is not active.
    assert manager.has_plugin(DROP_IN) != ("recording" in FEATURES)
    assert manager.has_plugin("agenttape")
    for mode in ("strict", "auto"):
        if f"asyncio-{mode}" in FEATURES:
            assert config.getini("asyncio_mode") == mode


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in item.iter_markers("cell"):
            if marker.args[0] not in FEATURES:
                item.add_marker(pytest.mark.skip(reason=f"{marker.args[0]} is off in this cell"))


@pytest.fixture(autouse=True)
def blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    """Any blocking call made inside the running event loop of an async test fails it."""
    function = getattr(request.node, "function", None)
    if "blockbuster" not in FEATURES or not inspect.iscoroutinefunction(function):
        yield
        return
    from blockbuster import blockbuster_ctx

    with blockbuster_ctx():
        yield
