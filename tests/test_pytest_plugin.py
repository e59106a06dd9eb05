"""The pytest plugin, run by pytest in a subprocess on a small project against a real server
that is stopped before the offline run."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path

import openai  # imported once: pytester drops what a test imports, patched or not
import pytest
from llm_standin import StandIn

import agenttape
from tests.servers import Seen, Server, chat_completion, json_reply

pytest_plugins = ["pytester"]

TESTS = """
    import os
    import httpx
    import pytest

    API = os.environ["API"]
    QUESTION = os.environ.get("QUESTION", "where is my order")


    @pytest.mark.agenttape
    def test_plain():
        assert httpx.post(API + "/ask", json={"q": QUESTION}).json()["echo"] == QUESTION


    @pytest.mark.agenttape
    @pytest.mark.parametrize("page", [1, 2, "a/b c"])
    def test_pages(page, agenttape_cassette):
        assert httpx.get(API + "/items", params={"page": page}).json()["page"] == str(page)
        assert agenttape_cassette.play_count + len(agenttape_cassette.interactions) >= 1


    @pytest.mark.agenttape("custom/shared.msgpack", allow_repeats=True)
    def test_with_path(agenttape_cassette):
        for _ in range(3):
            assert httpx.get(API + "/items", params={"page": 9}).json()["page"] == "9"
        assert agenttape_cassette.path.name == "shared.msgpack"
        assert agenttape_cassette.allow_repeats is True


    @pytest.mark.agenttape("custom/shared.msgpack")
    def test_shares_a_cassette():
        assert httpx.get(API + "/items", params={"page": 10}).json()["page"] == "10"


    class TestGroup:
        @pytest.mark.agenttape
        def test_in_class(self):
            assert httpx.get(API + "/items", params={"page": 5}).status_code == 200


    def test_fixture_without_marker(agenttape_cassette):
        assert httpx.get(API + "/items", params={"page": 6}).status_code == 200
"""


INI = """
[pytest]
addopts = -p no:cacheprovider
asyncio_default_fixture_loop_scope = function
"""


def app(seen: Seen) -> object:
    if seen.path == "/ask":
        return json_reply({"echo": seen.json()["q"]})
    return json_reply({"page": dict(seen.query).get("page")})


@pytest.fixture
def project(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> tuple[pytest.Pytester, Server]:
    server = serve(app)
    pytester.makepyfile(test_agent=textwrap.dedent(TESTS))
    pytester.makeini(INI)
    return pytester, server


PLUGINS = ("-p", "agenttape", "-p", "pytest_asyncio.plugin")
"""What the small projects' pytest loads, by entry-point name: agenttape's plugin as installed,
and pytest-asyncio for their async test. Every other plugin of this environment (hypothesis,
anyio, respx...) is left out: loading them took most of each run's time, and none of them is
under test. ``test_record_then_replay_offline`` runs with every plugin, as a user's pytest."""


def run(
    pytester: pytest.Pytester,
    api: Server | StandIn,
    *args: str,
    autoload: bool = False,
    **env: str,
) -> pytest.RunResult:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("API", api.url)
        patch.delenv("AGENTTAPE_MODE", raising=False)
        if autoload:
            patch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        else:
            patch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
            args = (*PLUGINS, *args)
        # Under CI pytest prints whole failure messages in its short summary; the assertions
        # on report text are made against the interactive layout.
        patch.delenv("CI", raising=False)
        patch.delenv("BUILD_NUMBER", raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        return pytester.runpytest_subprocess(*args)


def miss_after_recording(
    pytester: pytest.Pytester,
    api: Server | StandIn,
    name: str,
    source: str,
    variable: str,
    recorded: str,
    changed: str,
    tests: int,
) -> str:
    """Records ``source`` with ``variable=recorded``, stops the API, runs it again with
    ``changed`` so every test misses, and gives the report."""
    pytester.makepyfile(**{name: textwrap.dedent(source)})
    pytester.makeini(INI)
    run(pytester, api, "--agenttape-mode=once", **{variable: recorded}).assert_outcomes(
        passed=tests
    )
    api.stop()
    result = run(pytester, api, **{variable: changed})
    result.assert_outcomes(failed=tests)
    return result.stdout.str()


def test_record_then_replay_offline(project: tuple[pytest.Pytester, Server]) -> None:
    pytester, server = project
    run(pytester, server, "--agenttape-record", autoload=True).assert_outcomes(passed=8)
    assert len(server.seen) == 10
    # re-recording rewrites: the shared cassette holds this run's four requests, not eight
    run(pytester, server, "--agenttape-record").assert_outcomes(passed=8)
    hits = len(server.seen)
    assert hits == 20
    base = pytester.path / "cassettes" / "test_agent"
    names = {p.name for p in base.iterdir() if not p.name.endswith(".previous.msgpack")}
    # each re-recorded cassette keeps what it held beside it, for agenttape diff --verdict
    assert {p.name for p in base.glob("*.previous.msgpack")} == {
        name.replace(".msgpack", ".previous.msgpack") for name in names
    }
    unsafe = {n for n in names if n.startswith("test_pages[a")}
    assert names - unsafe == {
        "test_plain.msgpack",
        "test_pages[1].msgpack",
        "test_pages[2].msgpack",
        "TestGroup.test_in_class.msgpack",
        "test_fixture_without_marker.msgpack",
    }
    # the id "a/b c" made filesystem-safe, with a digest so it cannot collide with "a_b_c"
    assert len(unsafe) == 1 and re.fullmatch(
        r"test_pages\[a_b_c\]-[0-9a-f]{8}\.msgpack", unsafe.pop()
    )
    shared = pytester.path / "custom" / "shared.msgpack"
    assert len(agenttape.load(shared).interactions) == 4
    server.stop()

    replayed = run(pytester, server)  # default mode none, the server is gone
    replayed.assert_outcomes(passed=8)
    assert len(server.seen) == hits


def test_default_mode_never_touches_the_network(project: tuple[pytest.Pytester, Server]) -> None:
    pytester, server = project
    result = run(pytester, server, "-k", "test_plain")
    result.assert_outcomes(errors=1)
    assert server.seen == []
    text = result.stdout.str()
    assert "does not exist and mode is 'none'" in text
    assert "--agenttape-mode=once records it" in text
    assert not (pytester.path / "cassettes").exists()


def test_a_mode_people_type_is_read_or_named(project: tuple[pytest.Pytester, Server]) -> None:
    pytester, server = project
    wrong = pytester.runpytest_inprocess("--agenttape-mode=recrod")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "argument --agenttape-mode: 'recrod' is not a mode; the modes are none, once, "
        "new_episodes, all ('record' is accepted for 'all'); did you mean 'all'?"
    ) in wrong.stderr.str()
    run(pytester, server, "-k", "test_plain", "--agenttape-mode=record").assert_outcomes(passed=1)
    assert len(server.seen) == 1
    result = run(pytester, server, "-k", "test_plain", AGENTTAPE_MODE="always")
    result.assert_outcomes(errors=1)
    assert "During handling" not in result.stdout.str()
    assert (
        "AGENTTAPE_MODE: 'always' is not a mode; the modes are none, once, new_episodes, all "
        "('record' is accepted for 'all'); did you mean 'all'?"
    ) in result.stdout.str()
    assert len(server.seen) == 1


def test_a_miss_shows_the_nearest_candidate_not_library_internals(
    project: tuple[pytest.Pytester, Server],
) -> None:
    pytester, server = project
    run(pytester, server, "-k", "test_plain", "--agenttape-mode=once").assert_outcomes(passed=1)
    server.stop()
    result = run(pytester, server, "-k", "test_plain", QUESTION="where is my refund")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "No recorded interaction matches POST" in text
    assert "body.q: expected 'where is my order', got 'where is my refund'" in text
    assert "UnmatchedInteractionError raised at test_agent.py:11: assert httpx.post(" in text
    assert "httpx/_client.py" not in text and "_transport" not in text
    assert "--agenttape-record" in text


def test_on_unused_reports_drift(project: tuple[pytest.Pytester, Server]) -> None:
    pytester, server = project
    run(pytester, server, "-k", "test_plain", "--agenttape-record").assert_outcomes(passed=1)
    cassette = pytester.path / "cassettes" / "test_agent" / "test_plain.msgpack"
    pytester.makepyfile(
        test_agent="""
        import pytest

        @pytest.mark.agenttape
        def test_plain():
            pass
        """
    )
    assert run(pytester, server).ret == 0
    warned = run(pytester, server, "--agenttape-on-unused=warn", "-W", "always")
    warned.assert_outcomes(passed=1, warnings=1)
    assert "never played" in warned.stdout.str()
    failed = run(pytester, server, "--agenttape-on-unused=fail")
    failed.assert_outcomes(passed=1, errors=1)
    text = failed.stdout.str()
    assert "1 recorded interaction of cassette" in text and str(cassette) in text
    assert "POST http://127.0.0.1" in text


SUITE = """
    import os
    import httpx
    import pytest

    API = os.environ["API"]


    @pytest.mark.agenttape
    @pytest.mark.parametrize("n", range(12))
    def test_many(n):
        with httpx.Client() as client:
            for step in range(3):
                answer = client.post(API + "/ask", json={"q": f"{n}-{step}"}).json()
                assert answer["echo"] == f"{n}-{step}"


    @pytest.mark.asyncio
    @pytest.mark.agenttape
    async def test_async():
        async with httpx.AsyncClient() as client:
            answer = (await client.post(API + "/ask", json={"q": "async"})).json()
        assert answer["echo"] == "async"


    @pytest.mark.agenttape("shared.msgpack", mode="new_episodes")
    @pytest.mark.parametrize("n", range(6))
    def test_shared(n):
        assert httpx.post(API + "/ask", json={"q": f"shared-{n}"}).json()["echo"] == f"shared-{n}"
"""


def test_xdist_loses_and_corrupts_nothing(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    server = serve(app)
    pytester.makepyfile(test_suite=textwrap.dedent(SUITE))
    pytester.makeini(INI)
    recorded = run(pytester, server, "-n", "2", "-p", "xdist", "--agenttape-mode=new_episodes")
    recorded.assert_outcomes(passed=19)
    assert len(server.seen) == 12 * 3 + 1 + 6
    folder = pytester.path / "cassettes" / "test_suite"

    def check() -> None:
        for n in range(12):
            tape = agenttape.load(folder / f"test_many[{n}].msgpack")
            assert [i.request.body for i in tape.interactions] == [
                f'{{"q":"{n}-{step}"}}'.encode() for step in range(3)
            ]
        shared = agenttape.load(pytester.path / "shared.msgpack")
        assert sorted(i.request.body for i in shared.interactions) == sorted(
            f'{{"q":"shared-{n}"}}'.encode() for n in range(6)
        )

    check()
    # re-recording on two workers: the shared cassette is rewritten once, then added to
    rerecorded = run(pytester, server, "-n", "2", "-p", "xdist", "--agenttape-record")
    rerecorded.assert_outcomes(passed=19)
    assert len(server.seen) == 2 * (12 * 3 + 1 + 6)
    check()
    server.stop()
    replayed = run(pytester, server, "-n", "2", "-p", "xdist")
    replayed.assert_outcomes(passed=19)
    assert len(agenttape.load(folder / "test_async.msgpack").interactions) == 1
    assert not list(Path(pytester.path).rglob("*.tmp"))


SWALLOWED = """
    import os
    import httpx
    import pytest


    @pytest.mark.agenttape
    def test_fallback():
        try:
            answer = httpx.get(os.environ["API"] + "/items", params={"page": os.environ["PAGE"]}).json()
        except Exception:
            answer = {"page": "fallback"}
        assert answer["page"] == os.environ["PAGE"]


    @pytest.mark.agenttape
    def test_wrapped():
        try:
            httpx.get(os.environ["API"] + "/items", params={"page": os.environ["PAGE"]})
        except Exception as exc:
            raise RuntimeError("lookup failed") from exc
"""


def test_a_swallowed_miss_is_still_reported(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    text = miss_after_recording(
        pytester, serve(app), "test_swallow", SWALLOWED, "PAGE", "1", "2", tests=2
    )
    assert "agenttape: requests with no recording" in text  # test_fallback swallowed it
    assert text.count("url.query.page: expected '1', got '2'") == 2
    assert "surfaced as builtins.RuntimeError (lookup failed)" in text  # test_wrapped


SDK = """
    import os
    import openai
    import pytest


    @pytest.mark.agenttape
    def test_sdk():
        client = openai.OpenAI(base_url=os.environ["API"] + "/v1", api_key="sk-x", max_retries=0)
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": os.environ["QUESTION"]}]
        )
        assert reply.choices[0].message.content
"""


def test_a_miss_inside_an_sdk_is_reported_as_the_miss(
    pytester: pytest.Pytester, standin: StandIn
) -> None:
    text = miss_after_recording(
        pytester, standin, "test_sdk", SDK, "QUESTION", "hello", "goodbye", tests=1
    )
    assert "body.messages[0].content: expected 'hello', got 'goodbye'" in text
    assert "UnmatchedInteractionError raised" in text and "test_sdk.py:9" in text
    assert "openai/_base_client.py" not in text and "httpx" not in text


PLANTED = ["a directory open to all", "a link to a directory", "another user's directory"]


@pytest.mark.parametrize("planted", PLANTED)
def test_lock_files_never_follow_what_another_user_planted(
    pytester: pytest.Pytester, serve: Callable[..., Server], tmp_path: Path, planted: str
) -> None:
    """The lock directory has a predictable name in the shared temporary directory. A link
    planted where a lock file goes must not make the run write into the file it points to;
    a directory that is a link, or is another user's, is refused."""
    if planted == "another user's directory" and os.getuid() != 0:
        pytest.skip("giving a directory to another user takes root")
    server = serve(app)
    pytester.makepyfile(test_agent=textwrap.dedent(TESTS))
    pytester.makeini(INI)
    shared = tmp_path / "tmp"
    shared.mkdir()
    locks = shared / f"agenttape-locks-{os.getuid()}"
    if planted == "a link to a directory":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        locks.symlink_to(elsewhere)
    else:
        locks.mkdir()
        locks.chmod(0o777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    cassette = (pytester.path / "cassettes" / "test_agent" / "test_plain.msgpack").resolve()
    digest = hashlib.sha256(str(cassette).encode()).hexdigest()[:32]
    (locks / f"{digest}.lock").symlink_to(victim)
    if planted == "another user's directory":
        os.chown(locks, 4321, 4321)
    result = run(pytester, server, "--agenttape-mode=once", "-k", "test_plain", TMPDIR=str(shared))
    assert victim.read_text() == "precious\n"
    if planted == "a directory open to all":
        # This user's own: made private, the planted link replaced by a lock file.
        result.assert_outcomes(passed=1)
        assert stat.S_IMODE(locks.stat().st_mode) == 0o700
        assert not (locks / f"{digest}.lock").is_symlink()
    else:
        result.assert_outcomes(errors=1)
        assert f"the lock directory {locks}" in result.stdout.str()


LISTS_PLUGINS = """
    import pytest


    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        config.pluginmanager.get_plugins()  # a set: every plugin object must be hashable
"""

SNAPSHOT = """
    from inline_snapshot import snapshot


    def test_answer():
        assert {"answer": 42} == snapshot({"answer": 42})
"""


@pytest.mark.parametrize("recording", ["pytest-recording", "drop-in"])
def test_plugins_that_list_plugins_run_beside_agenttape(
    pytester: pytest.Pytester, recording: str
) -> None:
    """inline-snapshot (and any plugin that calls ``get_plugins()``) lists pytest's plugins
    in a set: an unhashable object of agenttape's there is an INTERNALERROR before any test,
    with pytest-recording active and with agenttape's drop-in serving it alike."""
    pytest.importorskip("inline_snapshot")
    pytester.makeconftest(textwrap.dedent(LISTS_PLUGINS))
    pytester.makepyfile(test_snapshot=textwrap.dedent(SNAPSHOT))
    disabled = ("-p", "no:recording") if recording == "drop-in" else ()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *disabled)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1)


RETRY_CONFTEST = """
    import os

    import openai
    import pytest

    BASE = os.environ["API"] + "/v1"


    @pytest.fixture
    def client():
        '''Built before any cassette is active, as a project's shared client is.'''
        return openai.OpenAI(base_url=BASE, api_key="sk-test", max_retries=2)
"""

RETRY_TESTS = """
    import logging
    import os
    import re

    import openai
    import pytest

    import agenttape

    BASE = os.environ["API"] + "/v1"
    CASSETTE = os.environ["CASSETTE"]
    FAULTS = [
        agenttape.fault("rate_limit", on="POST */v1/chat/completions", nth=1, retry_after=30)
    ]
    MESSAGES = [{"role": "user", "content": "hello"}]
    WAIT = re.compile(r"Retrying request (?:to [^ ]+ )?in ([0-9.]+) seconds")


    @pytest.fixture(autouse=True)
    def retried_at_once(caplog):
        '''The SDK retried once, after the injected 429, and waited nothing (fast_retries).'''
        caplog.set_level(logging.INFO, logger="openai")
        yield
        waits = [
            float(found.group(1))
            for record in caplog.get_records("call")
            if (found := WAIT.match(record.getMessage()))
        ]
        assert waits == [0.0]


    def ask(client):
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        assert reply.choices[0].message.content == "hi"


    async def ask_async(client):
        reply = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        assert reply.choices[0].message.content == "hi"


    def sync_client():
        return openai.OpenAI(base_url=BASE, api_key="sk-test", max_retries=2)


    def async_client():
        return openai.AsyncOpenAI(base_url=BASE, api_key="sk-test", max_retries=2)


    def test_use_cassette():
        with agenttape.use_cassette(CASSETTE, faults=FAULTS) as tape:
            ask(sync_client())
        assert len(tape.faults_fired) == 1 and tape.play_count == 1


    def test_client_built_in_a_fixture(client):
        with agenttape.use_cassette(CASSETTE, faults=FAULTS) as tape:
            ask(client)
        assert len(tape.faults_fired) == 1 and tape.play_count == 1


    @pytest.mark.agenttape(CASSETTE, faults=FAULTS)
    def test_marker(agenttape_cassette):
        ask(sync_client())
        assert len(agenttape_cassette.faults_fired) == 1


    @pytest.mark.vcr
    def test_vcr_marker_around_use_cassette():
        with agenttape.use_cassette(CASSETTE, faults=FAULTS) as tape:
            ask(sync_client())
        assert len(tape.faults_fired) == 1


    @pytest.mark.block_network
    def test_block_network_marker(client):
        with agenttape.use_cassette(CASSETTE, faults=FAULTS) as tape:
            ask(client)
        assert len(tape.faults_fired) == 1


    @pytest.mark.asyncio
    async def test_async_client():
        async with agenttape.use_cassette(CASSETTE, faults=FAULTS) as tape:
            await ask_async(async_client())
        assert len(tape.faults_fired) == 1


    @pytest.mark.asyncio
    async def test_async_client_in_a_sync_with():
        with agenttape.use_cassette(CASSETTE, faults=FAULTS) as tape:
            await ask_async(async_client())
        assert len(tape.faults_fired) == 1


    @pytest.mark.asyncio
    @pytest.mark.agenttape(CASSETTE, faults=FAULTS)
    async def test_async_marker(agenttape_cassette):
        await ask_async(async_client())
        assert len(agenttape_cassette.faults_fired) == 1
"""

CHAT = chat_completion("hi")


@pytest.mark.parametrize(
    "options",
    [(), ("--block-network",), ("--record-mode=none",), ("-p", "xdist.plugin", "-n", "2")],
    ids=["plain", "block-network", "record-mode-none", "xdist"],
)
def test_an_sdk_retry_after_an_injected_rate_limit_is_served_in_any_pytest_setup(
    pytester: pytest.Pytester, serve: Callable[..., Server], options: tuple[str, ...]
) -> None:
    """A user found a replay that an injected 429 made miss under pytest: one chat completion
    recorded, replayed with a ``rate_limit`` fault on the first call and the SDK retrying.
    However pytest combines things (the pytest-recording interface agenttape provides, a
    client made in a fixture, the network blocked, async clients, workers), the retry is
    served the recorded answer at once."""
    server = serve(lambda seen: json_reply(CHAT))
    cassette = pytester.path / "chat.msgpack"
    with agenttape.use_cassette(cassette, mode="once"):
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0)
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
        )
    server.stop()
    pytester.makeconftest(textwrap.dedent(RETRY_CONFTEST))
    pytester.makepyfile(test_retry=textwrap.dedent(RETRY_TESTS))
    pytester.makeini(INI)
    result = run(pytester, server, *options, CASSETTE=str(cassette))
    result.assert_outcomes(passed=8)


VCR_RETRY_TESTS = """
    import pytest


    @pytest.fixture
    def vcr_config():
        return {"match_on": ["method", "uri", "headers"]}


    @pytest.mark.vcr
    def test_retried_chat(client):
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
        )
        assert reply.choices[0].message.content == "hi"
"""


def test_the_vcr_marker_replays_an_sdk_retry_matched_on_headers(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    """pytest-recording's interface, as agenttape provides it, with ``headers`` in
    ``match_on``: the SDK's retry after a 429 differs in ``x-stainless-retry-count`` alone,
    and both are replayed from what the test recorded, whose ``Authorization`` is stored
    redacted (every replay missed on it, the miss calling the request identical)."""
    answers = iter([json_reply({"error": {"message": "slow down"}}, 429, [("retry-after", "0")])])
    server = serve(lambda seen: next(answers, json_reply(CHAT)))
    pytester.makeconftest(textwrap.dedent(RETRY_CONFTEST))
    pytester.makepyfile(test_vcr_retry=textwrap.dedent(VCR_RETRY_TESTS))
    pytester.makeini(INI)
    run(pytester, server, "--record-mode=once").assert_outcomes(passed=1)
    cassette = pytester.path / "cassettes" / "test_vcr_retry" / "test_retried_chat.msgpack"
    recorded = agenttape.load(cassette).interactions
    assert [i.response.status for i in recorded if i.response] == [429, 200]
    assert [dict(i.request.headers)["x-stainless-retry-count"] for i in recorded] == ["0", "1"]
    server.stop()
    result = run(pytester, server, "--record-mode=none")
    result.assert_outcomes(passed=1)


UNUSED_SESSION = """
    import sys


    def test_loaded_by_now():
        heavy = ["msgpack", "agenttape._core.models", "agenttape._core.tape"]
        heavy += ["agenttape._core.matching", "agenttape._core.wire", "agenttape._core.cassette"]
        print("HEAVY", [name for name in heavy if name in sys.modules])
"""


@pytest.mark.parametrize("recording", ["pytest-recording", "drop-in"])
def test_a_session_that_opens_no_cassette_loads_no_cassette_machinery(
    pytester: pytest.Pytester, recording: str
) -> None:
    """Installed and not used, the plugin loads what registers its options, markers and
    fixtures, not the model, the matching or the file format: pytest rewrites the asserts of
    every module of a plugin's package it imports, and where byte code is not written
    (``PYTHONDONTWRITEBYTECODE``, common in containers) it does so in every session."""
    pytester.makepyfile(test_unused=textwrap.dedent(UNUSED_SESSION))
    disabled = ("-p", "no:recording") if recording == "drop-in" else ()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *disabled)
    result.assert_outcomes(passed=1)
    assert "HEAVY []" in result.stdout.str()
