"""``pytest --agenttape-orphans``: cassettes of deleted tests and interactions no test played,
found on a real suite (also under xdist) and deleted only when asked."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from tests.servers import Server, json_reply
from tests.test_pytest_plugin import INI, run

pytest_plugins = ["pytester"]

AGENT = """
    import os
    import httpx
    import pytest

    API = os.environ["API"]

    @pytest.mark.agenttape
    def test_kept():
        httpx.get(API + "/kept")
        if not os.environ.get("FEWER"):
            httpx.get(API + "/no-longer")

    @pytest.mark.agenttape
    def test_deleted_later():
        httpx.get(API + "/gone")

    @pytest.mark.agenttape("cassettes/shared.msgpack")
    def test_shared():
        httpx.get(API + "/shared")
"""

DELETED = """
    @pytest.mark.agenttape
    def test_deleted_later():
        httpx.get(API + "/gone")
"""

OLD = """
    import os
    import httpx
    import pytest

    @pytest.mark.agenttape
    def test_old():
        httpx.get(os.environ["API"] + "/old")
"""


@pytest.fixture
def suite(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> tuple[pytest.Pytester, Server]:
    """A suite recorded in full, then one test deleted and one module deleted."""
    server = serve(lambda seen: json_reply({"path": seen.path}))
    pytester.makepyfile(test_agent=textwrap.dedent(AGENT), test_old=textwrap.dedent(OLD))
    pytester.makeini(INI)
    run(pytester, server, "--agenttape-mode=once").assert_outcomes(passed=4)
    (pytester.path / "test_old.py").unlink()
    pytester.makepyfile(test_agent=textwrap.dedent(AGENT.replace(DELETED, "")))
    server.stop()
    return pytester, server


def cassettes(pytester: pytest.Pytester) -> set[str]:
    return {str(p.relative_to(pytester.path)) for p in pytester.path.rglob("*.msgpack")}


def test_orphans_are_reported_and_nothing_is_deleted(suite: tuple[pytest.Pytester, Server]) -> None:
    pytester, server = suite
    before = cassettes(pytester)
    result = run(pytester, server, "--agenttape-orphans", FEWER="1")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    report = out[out.index("agenttape: orphans") :]
    assert "2 cassette files: no collected test uses\n" in report
    assert "  cassettes/test_agent/test_deleted_later.msgpack\n" in report
    assert "  cassettes/test_old/test_old.msgpack\n" in report
    assert "shared.msgpack\n" not in report.split("interactions")[0]
    assert "interactions no test played, in 1 cassette:" in report
    assert "  cassettes/test_agent/test_kept.msgpack: #1 of 2" in report
    assert "--agenttape-orphans=delete removes the files" in report
    assert cassettes(pytester) == before


def test_delete_removes_only_the_orphans(suite: tuple[pytest.Pytester, Server]) -> None:
    pytester, server = suite
    result = run(pytester, server, "--agenttape-orphans=delete")
    result.assert_outcomes(passed=2)
    assert "2 cassette files: deleted" in result.stdout.str()
    assert cassettes(pytester) == {
        "cassettes/shared.msgpack",
        "cassettes/test_agent/test_kept.msgpack",
    }
    assert not (pytester.path / "cassettes" / "test_old").exists()  # left empty, removed


def test_a_partial_run_condemns_no_cassette_of_what_it_did_not_collect(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))
    pytester.makepyfile(test_agent=textwrap.dedent(AGENT), test_old=textwrap.dedent(OLD))
    pytester.makeini(INI)
    run(pytester, server, "--agenttape-mode=once").assert_outcomes(passed=4)
    server.stop()
    result = run(pytester, server, "test_agent.py", "-k", "kept", "--agenttape-orphans=delete")
    result.assert_outcomes(passed=1, deselected=2)
    assert "no cassette file is an orphan" in result.stdout.str()
    assert len(cassettes(pytester)) == 4


def test_under_xdist_the_workers_findings_are_put_together(
    suite: tuple[pytest.Pytester, Server],
) -> None:
    pytester, server = suite
    result = run(pytester, server, "-p", "xdist", "-n", "2", "--agenttape-orphans", FEWER="1")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "2 cassette files: no collected test uses" in out
    assert "  cassettes/test_agent/test_kept.msgpack: #1 of 2" in out
    deleted = run(pytester, server, "-p", "xdist", "-n", "2", "--agenttape-orphans=delete")
    deleted.assert_outcomes(passed=2)
    assert cassettes(pytester) == {
        "cassettes/shared.msgpack",
        "cassettes/test_agent/test_kept.msgpack",
    }
