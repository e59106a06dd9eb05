"""A suite written for vcrpy and pytest-recording, in the shapes real projects give theirs,
recorded by the real vcrpy and pytest-recording against a real server, then run unchanged
on agenttape (``-p no:recording``) offline, and by pytest-recording again for comparison."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported here, once: an in-process run would otherwise import yaml anew after the one
# before it dropped it, and libyaml's C loader keeps the first import's node classes.
import vcr

import agenttape
from tests.cli_support import cli
from tests.servers import Reply, Seen, Server, json_reply, sse_reply

pytest_plugins = ["pytester"]

AGENTTAPE = ("-p", "no:recording", "-p", "no:cassetter")
RECORDING = ("-p", "no:agenttape", "-p", "no:cassetter")
# vcrpy before 8.0 reads an httpx response whole as it records it, and hands the test a
# response whose stream is consumed: a test that streams it (iter_raw) fails while recording
# with StreamConsumed (its replay streams). 8.0 records at httpcore's level instead.
VCRPY_RECORDS_HTTPX_STREAMS = tuple(int(part) for part in vcr.__version__.split(".")[:2]) >= (8, 0)

SERIALIZER = '''
"""A project's own serializer: request bodies that are JSON are stored parsed, as a
mapping, for readable diffs of cassettes."""
import json

from vcr.serializers import yamlserializer


def serialize(cassette_dict):
    for interaction in cassette_dict["interactions"]:
        request = interaction["request"]
        try:
            request["parsed_body"] = json.loads(request["body"])
        except (TypeError, ValueError):
            continue
        del request["body"]
    return yamlserializer.serialize(cassette_dict)


def deserialize(cassette_string):
    data = yamlserializer.deserialize(cassette_string)
    for interaction in data["interactions"]:
        request = interaction["request"]
        if "parsed_body" in request:
            request["body"] = json.dumps(request.pop("parsed_body"))
    return data
'''

CONFTEST = """
import json

import pytest

import parsed_body


def model(request):
    body = request.body or b""
    return json.loads(body).get("model") if body.startswith(b"{") else None


def same_model(r1, r2):
    assert model(r1) == model(r2)


def pytest_recording_configure(config, vcr):
    vcr.register_serializer("parsed", parsed_body)
    vcr.register_matcher("model", same_model)


def scrub(request):
    if request.body and request.body.startswith(b"{"):
        document = json.loads(request.body)
        if "email" in document:
            document["email"] = "<scrubbed>"
            request.body = json.dumps(document)
    return request


@pytest.fixture(scope="module")
def vcr_config():
    return {
        "serializer": "parsed",
        "filter_headers": ["authorization"],
        "before_record_request": scrub,
        "match_on": ["method", "host", "port", "path", "model"],
    }
"""

TESTS = """
import json
import os

import httpx
import pytest

API = os.environ["API"]
N = int(os.environ.get("N", "1"))
CHOICE = json.loads(os.environ.get("CHOICE", "null"))
CALL = os.environ.get("CALL", "call_Rec0rded00000001")  # an SDK draws one per run
EXTRA = json.loads(os.environ.get("EXTRA", "{}"))


def ask(content, **extra):
    messages = [
        {"role": "user", "content": content},
        {"role": "tool", "tool_call_id": CALL, "content": "ok"},
    ]
    body = {"model": "m1", "messages": messages, "n": N}
    if CHOICE:
        body["tool_choice"] = CHOICE
    body.update(EXTRA)
    body.update(extra)
    return httpx.post(
        API + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-live-1"}
    )


@pytest.mark.vcr
def test_chat(vcr):
    answer = ask("where is my order", email="ada@example.com")
    assert answer.content == b'{"answer": "where is my order", "seen": 1}'
    assert answer.headers["x-request-id"] == "req-1"
    recorded = json.loads(vcr.requests[0].body)
    assert recorded["email"] == "<scrubbed>"
    assert "authorization" not in vcr.requests[0].headers
    assert len(vcr) == 1 and vcr.responses[0]["status"]["code"] == 200


@pytest.mark.vcr
def test_stream():
    with httpx.stream("GET", API + "/v1/stream") as response:
        chunks = list(response.iter_raw())
    assert b"".join(chunks) == b"data: one\\n\\ndata: two\\n\\n"


@pytest.mark.vcr(match_on=["method", "path", "body"])
def test_upload():
    sent = httpx.post(API + "/v1/files", files={"file": ("notes.txt", b"hello")})
    assert sent.json() == {"received": True}


class TestTurns:
    @pytest.mark.vcr
    def test_two_models(self, vcr):
        assert ask("first").json()["answer"] == "first"
        assert ask("second", model="m2").json()["answer"] == "second"
        assert vcr.play_count in (0, 2)


@pytest.mark.vcr(record_mode="none")
@pytest.mark.default_cassette("shared")
def test_shared_cassette(vcr):
    assert ask("shared", email="grace@example.com").json()["answer"] == "shared"
    assert vcr._path.endswith("shared.parsed")
"""


def app(seen: Seen) -> Reply:
    if seen.path == "/v1/stream":
        return sse_reply([b"data: one\n\n", b"data: two\n\n"])
    if seen.path == "/v1/files":
        return json_reply({"received": b"hello" in seen.body})
    content = seen.json()["messages"][0]["content"]
    body = json.dumps({"answer": content, "seen": 1}).encode()
    return Reply(
        headers=[("Content-Type", "application/json"), ("X-Request-Id", "req-1")], chunks=[body]
    )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """One server for the module: the suite is recorded once, against its address."""
    with Server(app) as running:
        yield running


_recorded: dict[str, bytes] = {}


@pytest.fixture
def suite(pytester: pytest.Pytester, server: Server) -> pytest.Pytester:
    """The suite with its cassettes, recorded by vcrpy and pytest-recording (the first time,
    then copied)."""
    pytester.makepyfile(
        parsed_body=SERIALIZER, conftest=CONFTEST, test_agent=textwrap.dedent(TESTS)
    )
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.syspathinsert()
    cassettes = pytester.path / "cassettes" / "test_agent"
    if not _recorded:
        result = run(pytester, server, *RECORDING, "--record-mode=once", "-k", "not shared")
        if VCRPY_RECORDS_HTTPX_STREAMS:
            result.assert_outcomes(passed=4)
        else:  # recorded all the same: the stream's body is in its cassette
            result.assert_outcomes(passed=3, failed=1)
            result.stdout.fnmatch_lines(["FAILED test_agent.py::test_stream - *StreamConsumed*"])
        # A cassette shared under its own name, as projects keep one for several tests.
        chat = (cassettes / "test_chat.parsed").read_text()
        (cassettes / "shared.parsed").write_text(chat.replace("where is my order", "shared"))
        _recorded.update({path.name: path.read_bytes() for path in cassettes.iterdir()})
    cassettes.mkdir(parents=True, exist_ok=True)
    for name, data in _recorded.items():
        (cassettes / name).write_bytes(data)
    return pytester


def run(pytester: pytest.Pytester, server: Server, *args: str, **env: str) -> pytest.RunResult:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("API", server.url)
        patch.delenv("AGENTTAPE_MODE", raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_a_pytest_recording_suite_runs_unchanged_offline(
    suite: pytest.Pytester, server: Server
) -> None:
    pytester = suite
    cassettes = pytester.path / "cassettes" / "test_agent"
    stored = (cassettes / "test_chat.parsed").read_text()
    assert "parsed_body:" in stored and "sk-live-1" not in stored and "<scrubbed>" in stored
    before = {path.name: path.read_bytes() for path in cassettes.iterdir()}
    served = len(server.seen)

    ours = run(pytester, server, *AGENTTAPE)
    ours.assert_outcomes(passed=5)
    assert len(server.seen) == served  # replayed offline
    assert "requests changed since recording" not in ours.stdout.str()
    # Read as they are, nothing converted or written.
    assert {path.name: path.read_bytes() for path in cassettes.iterdir()} == before

    theirs = run(pytester, server, *RECORDING)
    theirs.assert_outcomes(passed=4, failed=1)  # vcrpy replays the upload's boundary: a miss
    assert "test_upload" in theirs.stdout.str()


def test_requests_changed_since_recording_are_named_field_by_field(
    suite: pytest.Pytester, server: Server
) -> None:
    pytester = suite
    changed = {"N": "2", "CHOICE": json.dumps({"type": "auto"})}

    result = run(pytester, server, *AGENTTAPE, **changed)
    result.assert_outcomes(passed=5)
    text = result.stdout.str()
    summary = text[text.index("agenttape: requests changed since recording") :]
    assert "test_agent.py::test_chat: its requests changed since" in summary
    assert "cassettes/test_agent/test_chat.parsed was recorded" in summary
    assert "request changed: request body.n: 1, now 2" in summary
    assert 'request changed: request body.tool_choice: added ({"type": "auto"})' in summary
    assert "TestTurns::test_two_models" in summary and "test_shared_cassette" in summary
    assert "test_upload" not in summary  # a new multipart boundary is no change
    assert "test_stream" not in summary
    assert "3 tests replay cassettes recorded for other requests" in summary

    failing = run(pytester, server, *AGENTTAPE, "--agenttape-drift=fail", **changed)
    failing.assert_outcomes(passed=2, failed=3)
    failing.stdout.fnmatch_lines(["*request changed: request body.n: 1, now 2*"])

    quiet = run(pytester, server, *AGENTTAPE, "--agenttape-drift=off", **changed)
    quiet.assert_outcomes(passed=5)
    assert "changed since recording" not in quiet.stdout.str()


def test_fields_drawn_anew_each_run_are_left_out_of_the_drift_report(
    suite: pytest.Pytester, server: Server
) -> None:
    """A tool call id a library draws on each run is no change since recording."""
    pytester = suite
    changed = {"N": "2", "CHOICE": json.dumps({"type": "auto"})}
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "agenttape_ignore_json_fields =\n    n\n    tool_choice.type\n"
    )
    result = run(pytester, server, *AGENTTAPE, **changed)
    result.assert_outcomes(passed=5)
    text = result.stdout.str()
    summary = text[text.index("agenttape: requests changed since recording") :]
    assert "body.n:" not in summary
    assert "request body.tool_choice: added ({})" in summary  # what is left of it

    pytester.makeini("[pytest]\nagenttape_ignore_json_fields = messages[\n")
    bad = run(pytester, server, *AGENTTAPE)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*agenttape_ignore_json_fields: not a JSON path: 'messages['*"])


def test_ids_drawn_anew_are_left_out_and_explicit_nulls_said_in_one_line(
    suite: pytest.Pytester, server: Server
) -> None:
    """On a real suite most drift lines were tool-call ids an SDK draws per run, and another
    client now sends explicit nulls: neither is a change worth a line per field."""
    nulls = json.dumps({"store": None, "user": None})
    result = run(
        suite, server, *AGENTTAPE, "--agenttape-drift=fail", CALL="call_Drawn4new", EXTRA=nulls
    )
    result.assert_outcomes(passed=5)
    text = result.stdout.str()
    summary = text[text.index("agenttape: requests changed since recording") :]
    assert "its requests changed" not in summary and "tool_call_id" not in summary
    assert summary.splitlines()[1] == (
        "benign: 3 tests now send explicit nulls where the cassettes hold nothing "
        "(request body.store, request body.user); left out"
    )

    both = run(suite, server, *AGENTTAPE, CALL="call_Drawn4new", EXTRA=nulls, N="2")
    both.assert_outcomes(passed=5)
    out = both.stdout.str()
    assert "request changed: request body.n: 1, now 2" in out
    assert "tool_call_id" not in out and "body.store" not in out.split("benign: ")[0]


def test_new_recordings_are_agenttape_cassettes_read_first(
    suite: pytest.Pytester, server: Server
) -> None:
    pytester = suite
    cassettes = pytester.path / "cassettes" / "test_agent"
    pytester.makepyfile(
        test_more=textwrap.dedent(
            """
            import os

            import httpx
            import pytest

            API = os.environ["API"]


            @pytest.mark.vcr(record_mode="new_episodes")
            def test_chat():
                body = {"model": "m3", "messages": [{"role": "user", "content": "again"}]}
                answer = httpx.post(API + "/v1/chat/completions", json=body)
                assert answer.json()["answer"] == "again"
            """
        )
    )
    (cassettes.parent / "test_more").mkdir()
    old = cassettes.parent / "test_more" / "test_chat.parsed"
    old.write_text((cassettes / "test_chat.parsed").read_text())
    served = len(server.seen)
    run(pytester, server, *AGENTTAPE, "test_more.py").assert_outcomes(passed=1)
    assert len(server.seen) == served + 1  # the new request only
    new = old.with_suffix(".msgpack")
    cassette = agenttape.load(new)
    assert [i.request.url.rsplit("/", 1)[1] for i in cassette.interactions] == [
        "completions",
        "completions",
    ]
    added = cassette.interactions[1]
    assert added.response is not None
    assert added.response.body == b'{"answer": "again", "seen": 1}'
    assert "authorization" not in dict(added.request.headers)
    assert cassette.metadata["imported_from"] == {"format": "vcrpy", "path": old.name}

    old.write_text("not a cassette any more: the msgpack one is read")
    run(pytester, server, *AGENTTAPE, "test_more.py").assert_outcomes(passed=1)
    assert len(server.seen) == served + 1


def test_block_network_and_the_vcr_fixture_without_a_marker(
    pytester: pytest.Pytester, server: Server
) -> None:
    served = len(server.seen)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_network=textwrap.dedent(
            """
            import os

            import httpx
            import pytest

            API = os.environ["API"]


            @pytest.mark.block_network
            def test_blocked():
                with pytest.raises(ConnectionError, match="Network is disabled"):
                    httpx.get(API + "/v1/stream")


            @pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
            def test_allowed():
                assert httpx.get(API + "/v1/stream").status_code == 200


            def test_no_marker(vcr, record_mode, vcr_cassette_dir, default_cassette_name):
                assert vcr is None and record_mode == "none"
                assert vcr_cassette_dir.endswith(os.path.join("cassettes", "test_network"))
                assert default_cassette_name == "test_no_marker"
            """
        )
    )
    run(pytester, server, *AGENTTAPE).assert_outcomes(passed=3)
    assert len(server.seen) == served + 1


ALLOWED_HOSTS = """
import os

import httpx
import pytest

API = os.environ["API"]


@pytest.mark.block_network(allowed_hosts=[r"127\\.0\\.0\\.\\d+"])
def test_a_regex():
    assert httpx.get(API + "/v1/stream").status_code == 200


@pytest.mark.block_network(allowed_hosts=["127"])
def test_matched_from_the_start_of_the_host():
    assert httpx.get(API + "/v1/stream").status_code == 200


@pytest.mark.block_network(allowed_hosts=[r"10\\.\\d+", "example"])
def test_refused():
    with pytest.raises(Exception, match="Network is disabled"):
        httpx.get(API + "/v1/stream")


@pytest.mark.block_network
def test_the_option():
    assert httpx.get(API + "/v1/stream").status_code == 200
"""


@pytest.mark.parametrize("plugins", [AGENTTAPE, RECORDING], ids=["agenttape", "pytest-recording"])
def test_allowed_hosts_are_regular_expressions(
    pytester: pytest.Pytester, server: Server, plugins: tuple[str, ...]
) -> None:
    """As pytest-recording reads them: each a regular expression matched from the start of
    the host (``re.match``), from the marker, ``--allowed-hosts`` or ``vcr_config``."""
    served = len(server.seen)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_hosts=ALLOWED_HOSTS)
    result = run(pytester, server, *plugins, r"--allowed-hosts=^1\d\d\.0\.")
    result.assert_outcomes(passed=4)
    assert len(server.seen) == served + 3


NO_KEY = """
import os

import openai
import pytest


@pytest.mark.vcr(record_mode="none")
def test_a_client_without_its_key_refuses_to_start(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert os.environ.get("OPENAI_API_KEY") is None and os.getenv("OPENAI_API_KEY") is None
    with pytest.raises(openai.OpenAIError, match="api_key"):
        openai.OpenAI()
"""


@pytest.mark.parametrize("plugins", [AGENTTAPE, RECORDING], ids=["agenttape", "pytest-recording"])
def test_a_suite_sees_its_environment_as_it_is(
    pytester: pytest.Pytester, server: Server, plugins: tuple[str, ...]
) -> None:
    """The drop-in gives no placeholder API keys (agenttape's own cassettes do): a suite
    brings its own dummy keys, and may test what its code does without one, as under
    vcrpy."""
    pytest.importorskip("openai")  # the SDK the suite drives (the vcrpy cells have none)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_keys=NO_KEY)
    run(pytester, server, *plugins).assert_outcomes(passed=1)


def test_workers_report_drift_to_one_summary(suite: pytest.Pytester, server: Server) -> None:
    result = run(suite, server, *AGENTTAPE, "-n", "2", N="3")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(
        ["*agenttape: requests changed since recording*", "*request body.n: 1, now 3*"]
    )


def test_import_vcr_reads_a_project_serializer(suite: pytest.Pytester, tmp_path: Path) -> None:
    pytester = suite
    source = pytester.path / "cassettes" / "test_agent" / "test_chat.parsed"
    target = tmp_path / "chat.msgpack"
    refused = cli("import-vcr", source, target, cwd=pytester.path)
    assert refused.returncode == 2
    assert "parsed_body" in refused.stderr and "--serializer" in refused.stderr
    (pytester.path / "serializers.py").write_text("import parsed_body as parsed\n")
    converted = cli(
        "import-vcr", source, target, "--serializer", "serializers:parsed", cwd=pytester.path
    )
    assert converted.returncode == 0, converted.stderr
    (interaction,) = agenttape.load(target).interactions
    assert json.loads(interaction.request.body)["email"] == "<scrubbed>"
    assert interaction.response is not None
    assert interaction.response.body == b'{"answer": "where is my order", "seen": 1}'
