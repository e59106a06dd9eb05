"""agenttape's drop-in for pytest-recording stays out of a project that does not use that
interface: no fixture of its runs in the project's tests, no option of the project's is
redefined, and nothing it needs is imported. A suite that uses it (tests/test_recording_plugin.py)
has it; here, projects that never asked, run by pytest with the plugin loaded from its entry
point and pytest-recording turned off, as where it is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import Reply, Seen, Server, json_reply

pytest_plugins = ["pytester"]

AGENTTAPE = ("-p", "no:recording", "-p", "no:cassetter", "-p", "no:cacheprovider")


def app(seen: Seen) -> Reply:
    return json_reply({"path": seen.path})


@pytest.fixture
def server() -> Iterator[Server]:
    with Server(app) as running:
        yield running


def run(pytester: pytest.Pytester, server: Server, *args: str) -> pytest.RunResult:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("API", server.url)
        patch.delenv("AGENTTAPE_MODE", raising=False)
        return pytester.runpytest_inprocess(*AGENTTAPE, *args)


def test_a_project_fixture_named_vcr_stays_the_project_s_and_is_not_autouse(
    pytester: pytest.Pytester, server: Server
) -> None:
    pytester.makeconftest(
        """
        import pytest

        RAN = []


        @pytest.fixture
        def vcr():
            RAN.append("vcr")
            return "the project's"
        """
    )
    pytester.makepyfile(
        test_project="""
        import conftest


        def test_never_asks(request):
            assert conftest.RAN == []
            drop_in = {"vcr", "block_network", "vcr_markers", "record_mode",
                       "vcr_cassette_dir", "disable_recording", "_agenttape_recording"}
            assert drop_in.isdisjoint(request.fixturenames)


        def test_asks(vcr):
            assert vcr == "the project's" and conftest.RAN == ["vcr"]
        """
    )
    run(pytester, server, "-p", "no:randomly").assert_outcomes(passed=2)


def test_a_project_defining_pytest_recording_options_starts_and_keeps_them(
    pytester: pytest.Pytester, server: Server
) -> None:
    pytester.makeconftest(
        """
        def pytest_addoption(parser):
            parser.addoption("--block-network", action="store_true", help="the project's own")
            parser.addoption("--record-mode", default="project")
            parser.addoption("--allowed-hosts", type=int, default=0)
            parser.addoption("--disable-recording", action="count", default=0)
        """
    )
    pytester.makepyfile(
        test_project="""
        import os

        import httpx


        def test_options_are_the_project_s(pytestconfig):
            assert pytestconfig.getoption("block_network") is True
            assert pytestconfig.getoption("record_mode") == "project"
            assert pytestconfig.getoption("allowed_hosts") == 7
            assert pytestconfig.getoption("disable_recording") == 2
            # the project's --block-network means what the project says: not agenttape's block
            assert httpx.get(os.environ["API"] + "/open").status_code == 200
        """
    )
    result = run(
        pytester,
        server,
        "--block-network",
        "--allowed-hosts=7",
        "--disable-recording",
        "--disable-recording",
    )
    result.assert_outcomes(passed=1)
    assert [seen.path for seen in server.seen] == ["/open"]


def test_a_project_that_never_asked_imports_nothing_of_the_drop_in(
    pytester: pytest.Pytester,
) -> None:
    """Run in a process of its own: the modules the drop-in needs are never imported."""
    pytester.makepyfile(
        test_project="""
        import sys

        import pytest


        def test_nothing_of_the_drop_in(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("agenttape")
            loaded = [
                name
                for name in ("vcr", "yaml", "agenttape._tools.vcr_tape",
                             "agenttape._tools.network_block", "agenttape._tools.vcr_cache")
                if name in sys.modules
            ]
            assert loaded == []
        """
    )
    result = pytester.runpytest_subprocess(*AGENTTAPE)
    result.assert_outcomes(passed=1)


def test_block_network_given_on_the_command_line_switches_the_drop_in_on(
    pytester: pytest.Pytester, server: Server
) -> None:
    """A suite with no marker at all opts in by naming pytest-recording's option."""
    pytester.makepyfile(
        test_project="""
        import os

        import httpx
        import pytest


        def test_blocked():
            with pytest.raises(ConnectionError, match="Network is disabled"):
                httpx.get(os.environ["API"] + "/blocked")
        """
    )
    run(pytester, server, "--block-network").assert_outcomes(passed=1)
    run(pytester, server).assert_outcomes(failed=1)  # without it the request goes out
    assert [seen.path for seen in server.seen] == ["/blocked"]


def test_the_drop_in_s_fixtures_answer_where_a_test_asks_for_them(
    pytester: pytest.Pytester, server: Server
) -> None:
    """No marker anywhere: a test asking for pytest-recording's fixtures is enough."""
    pytester.makepyfile(
        test_project="""
        import os


        def test_fixtures(record_mode, vcr_cassette_dir, default_cassette_name, vcr):
            assert record_mode == "none" and vcr is None
            assert vcr_cassette_dir.endswith(os.path.join("cassettes", "test_project"))
            assert default_cassette_name == "test_fixtures"
        """
    )
    run(pytester, server).assert_outcomes(passed=1)
