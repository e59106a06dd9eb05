"""A misspelled agenttape marker stops the run instead of letting the test go live, and
``--block-network`` keeps unmarked tests off the network."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from agenttape._tools.markers import meant
from tests.servers import Server, json_reply
from tests.test_pytest_plugin import INI, run

pytest_plugins = ["pytester"]

SUITE = """
    import os
    import httpx
    import pytest

    @pytest.mark.agentape
    def test_misspelled():
        httpx.get(os.environ["API"] + "/live")

    @pytest.mark.agenttape
    def test_right():
        pass

    def test_unmarked():
        httpx.get(os.environ["API"] + "/live")
"""


def test_a_misspelled_marker_is_a_usage_error_and_nothing_goes_live(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({}))
    pytester.makepyfile(test_suite=textwrap.dedent(SUITE))
    pytester.makeini(INI)
    result = run(pytester, server)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "test_suite.py::test_misspelled: @pytest.mark.agentape is not a marker; "
        "did you mean @pytest.mark.agenttape?"
    ) in result.stderr.str()
    assert server.seen == []


def test_a_registered_marker_of_a_near_name_is_left_alone(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({}))
    pytester.makepyfile(test_suite=textwrap.dedent(SUITE))
    pytester.makeini(INI + "markers =\n    agentape: our own marker\n")
    run(pytester, server, "-k", "misspelled").assert_outcomes(passed=1, deselected=2)
    assert len(server.seen) == 1


def test_near_misses() -> None:
    assert meant("agentape", set()) == "agenttape"
    assert meant("AgentTape", set()) == "agenttape"
    assert meant("block_netwrok", set()) == "block_network"
    assert meant("vcrr", set()) == "vcr"
    assert meant("slow", set()) is None
    assert meant("agenttape", set()) is None


def test_block_network_in_the_ini_keeps_unmarked_tests_off_the_network(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({}))
    pytester.makepyfile(test_suite=textwrap.dedent(SUITE.replace("agentape", "agenttape")))
    pytester.makeini(INI.replace("addopts = ", "addopts = --block-network "))
    result = run(pytester, server, "-k", "unmarked")
    result.assert_outcomes(failed=1, deselected=2)
    assert "NetworkBlockedError" in result.stdout.str()
    assert server.seen == []


def test_block_network_lets_a_marked_test_replay_its_cassette_and_blocks_the_unmarked(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    """The recipe for an offline suite: ``--block-network`` with the cassettes recorded and
    the server stopped. A test marked ``agenttape`` replays its own cassette; an unmarked
    test is blocked."""
    server = serve(lambda seen: json_reply({"path": seen.path}))
    pytester.makepyfile(
        test_suite=textwrap.dedent(
            """
            import os
            import httpx
            import pytest

            @pytest.mark.agenttape
            def test_marked():
                assert httpx.get(os.environ["API"] + "/recorded").json() == {"path": "/recorded"}

            def test_unmarked():
                httpx.get(os.environ["API"] + "/live")
            """
        )
    )
    pytester.makeini(INI)
    run(pytester, server, "-k", "marked and not unmarked", "--agenttape-record").assert_outcomes(
        passed=1, deselected=1
    )
    server.stop()
    result = run(pytester, server, "--block-network")
    result.assert_outcomes(passed=1, failed=1)
    assert "test_unmarked" in result.stdout.str() and "NetworkBlockedError" in result.stdout.str()
