"""The tape behind the pytest-recording drop-in, driven directly: cassettes recorded by vcrpy
itself (JSON serializer here), replayed by agenttape as vcrpy would serve them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import vcr
from vcr.cassette import Cassette

import agenttape
from agenttape._tools.vcr import VcrImportError
from agenttape._tools.vcr_tape import VcrTape
from tests.servers import Seen, Server, json_reply

VCRPY = tuple(int(part) for part in vcr.__version__.split(".")[:2])


def app(seen: Seen) -> Any:
    return json_reply({"path": seen.path, "body": seen.body.decode() or None})


def tape(
    path: Path, record_mode: str, registered: tuple[Callable[..., Any], ...] = (), **options: Any
) -> VcrTape:
    """The drop-in's tape over vcrpy's ``Cassette``; ``registered``: matchers a project
    adds with ``vcr.register_matcher``, under their names."""
    config_vcr = vcr.VCR(serializer="json")
    for matcher in registered:
        config_vcr.register_matcher(matcher.__name__, matcher)
    config = config_vcr.get_merged_config(path=str(path), record_mode=record_mode, **options)
    for key in ("path_transformer", "func_path_generator", "record_on_exception"):
        config.pop(key)
    return VcrTape(Cassette(**config), suffix=".json", record_mode=record_mode)


def test_vcrpy_semantics_over_a_json_cassette(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(app)
    other = serve(app)
    path = tmp_path / "chat.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        first = httpx.post(f"{server.url}/a", json={"n": 1}).content
        second = httpx.post(f"{server.url}/a", json={"n": 2}).content
    served = len(server.seen)

    replay = tape(path, "none", ignore_hosts=["localhost"], allow_playback_repeats=False)
    replay.start()
    try:
        # vcrpy's default matching: method and URL; each recorded response once, in order.
        assert httpx.post(f"{server.url}/a", json={"n": 9}).content == first
        assert httpx.post(f"{server.url}/a", json={"n": 2}).content == second
        with pytest.raises(agenttape.UnmatchedInteractionError, match="record-mode"):
            httpx.post(f"{server.url}/a", json={"n": 3})
        # An ignored host goes to the network, unrecorded.
        live = httpx.get(f"{other.url.replace('127.0.0.1', 'localhost')}/live")
        assert live.json()["path"] == "/live"
    finally:
        replay.stop()
    assert len(server.seen) == served
    assert replay.vcr.play_count == 2 and replay.vcr.all_played
    assert [drift.differences for drift in replay.drifts] == [
        ["request changed: request body.n: 1, now 9"]
    ]
    assert not path.with_suffix(".msgpack").exists()  # nothing recorded

    # Mode all: every request recorded; a loaded one no new recording matches is kept.
    again = tape(path, "all")
    again.start()
    try:
        httpx.post(f"{server.url}/b", json={"n": 4})
    finally:
        again.stop()
    saved = agenttape.load(path.with_suffix(".msgpack")).interactions
    assert [(i.request.url.rsplit("/", 1)[1], json.loads(i.request.body)["n"]) for i in saved] == [
        ("a", 1),
        ("a", 2),
        ("b", 4),
    ]
    assert not path.with_suffix(".previous.msgpack").exists()  # the YAML/JSON is the old one

    # Mode all again, over the msgpack successor: what it held is kept beside it.
    first_msgpack = path.with_suffix(".msgpack").read_bytes()
    rewrite = tape(path, "all")
    rewrite.start()
    try:
        httpx.post(f"{server.url}/c", json={"n": 5})
    finally:
        rewrite.stop()
    assert path.with_suffix(".previous.msgpack").read_bytes() == first_msgpack


@pytest.mark.skipif(
    VCRPY < (8, 0),
    reason="vcrpy's drop_unused_requests came in 8.0 (before, its merged config leaves the "
    "option out, and the cassette keeps everything, as the drop-in's then does)",
)
def test_drop_unused_requests_as_vcrpy_keeps_what_was_played(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(app)
    path = tmp_path / "chat.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        for name in ("a", "b", "c"):
            httpx.get(f"{server.url}/{name}")
    original = path.read_text()

    def paths(cassette: Path) -> list[str]:
        return [i.request.url.rsplit("/", 1)[1] for i in agenttape.load(cassette).interactions]

    # vcrpy itself, for the comparison: the cassette keeps what was played, in play order.
    theirs = tmp_path / "theirs.json"
    theirs.write_text(original)
    with vcr.VCR(serializer="json").use_cassette(
        str(theirs), record_mode="none", drop_unused_requests=True
    ):
        httpx.get(f"{server.url}/c")
        httpx.get(f"{server.url}/a")
    kept = json.loads(theirs.read_text())["interactions"]
    assert [i["request"]["uri"].rsplit("/", 1)[1] for i in kept] == ["c", "a"]

    replay = tape(path, "none", drop_unused_requests=True)
    replay.start()
    try:
        httpx.get(f"{server.url}/c")
        httpx.get(f"{server.url}/a")
    finally:
        replay.stop()
    assert paths(path.with_suffix(".msgpack")) == ["c", "a"]
    assert path.read_text() == original  # the old file stays as it is

    # Everything played: nothing to drop, nothing written.
    path.with_suffix(".msgpack").unlink()
    replay = tape(path, "none", drop_unused_requests=True)
    replay.start()
    try:
        for name in ("a", "b", "c"):
            httpx.get(f"{server.url}/{name}")
    finally:
        replay.stop()
    assert not path.with_suffix(".msgpack").exists()

    # Mode all: only what was recorded now.
    again = tape(path, "all", drop_unused_requests=True)
    again.start()
    try:
        httpx.get(f"{server.url}/b")
    finally:
        again.stop()
    assert paths(path.with_suffix(".msgpack")) == ["b"]
    path.with_suffix(".msgpack").unlink()
    without = tape(path, "all")
    without.start()
    try:
        httpx.get(f"{server.url}/b")
    finally:
        without.stop()
    assert paths(path.with_suffix(".msgpack")) == ["a", "c", "b"]  # b replaced, the rest kept


def test_an_interaction_is_read_when_first_played_so_a_malformed_one_left_unplayed_is_no_matter(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """As vcrpy, which reads a response when it plays it: the cassette's other interactions
    replay, and the malformed one is refused naming the file when a request asks for it."""
    server = serve(app)
    path = tmp_path / "chat.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        first = httpx.get(f"{server.url}/a").content
        httpx.get(f"{server.url}/b")
    cassette = json.loads(path.read_text())
    cassette["interactions"][1]["response"]["status"]["code"] = "not a number"
    path.write_text(json.dumps(cassette))
    server.stop()

    replay = tape(path, "none")
    replay.start()
    try:
        assert httpx.get(f"{server.url}/a").content == first
        with pytest.raises(VcrImportError, match=r"chat\.json: interaction 1 is malformed"):
            httpx.get(f"{server.url}/b")
    finally:
        replay.stop()


@pytest.mark.parametrize(
    ("record_mode", "recorded_before", "is_recording"),
    [
        ("none", True, False),
        ("once", True, False),
        ("once", False, True),
        ("new_episodes", True, True),
        ("all", True, True),
    ],
)
def test_the_tape_says_whether_it_records_as_vcrpy_record_modes_mean(
    tmp_path: Path,
    serve: Callable[..., Server],
    record_mode: str,
    recorded_before: bool,
    is_recording: bool,
) -> None:
    """What decides whether httpx transports made under it share one TLS context."""
    server = serve(app)
    path = tmp_path / "chat.json"
    if recorded_before:
        with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
            httpx.get(f"{server.url}/a")
    played = tape(path, record_mode)
    played.start()
    try:
        assert played.is_recording is is_recording
        with httpx.Client() as client, httpx.Client() as other:
            contexts = (client._transport._pool._ssl_context, other._transport._pool._ssl_context)
            assert (contexts[0] is contexts[1]) is not is_recording
            assert client.get(f"{server.url}/a").json()["path"] == "/a"
    finally:
        played.stop()


def test_no_body_and_an_empty_body_match_alike(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """vcrpy records a GET's body as null from requests and as '' from httpx: with ``body`` in
    ``match_on``, a GET replays whichever client recorded it (the miss report, which calls the
    two identical, agrees)."""
    import requests

    server = serve(app)
    path = tmp_path / "get.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        recorded = requests.get(f"{server.url}/doc").content
    assert json.loads(path.read_text())["interactions"][0]["request"]["body"] is None
    served = len(server.seen)

    replay = tape(path, "none", match_on=["method", "path", "body"], allow_playback_repeats=True)
    replay.start()
    try:
        with requests.get(f"{server.url}/doc", stream=True) as streamed:
            assert b"".join(streamed.iter_content(7)) == recorded
        assert httpx.get(f"{server.url}/doc").content == recorded
        with pytest.raises(agenttape.UnmatchedInteractionError, match="body"):
            httpx.request("GET", f"{server.url}/doc", content=b"x")
    finally:
        replay.stop()
    assert len(server.seen) == served


def tenant(r1: Any, r2: Any) -> None:
    """A project's own matcher, as ``vcr.register_matcher`` adds one."""
    assert r1.headers.get("x-tenant") == r2.headers.get("x-tenant"), "another tenant"


def test_a_miss_names_the_vcrpy_matchers_that_rejected_each_candidate(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """The drop-in matches with vcrpy's matchers, so its miss explains in theirs: a request
    that agenttape's own comparison calls identical to a recorded one (its fields: method, URL,
    body as JSON) is rejected by ``headers``, a project's matcher or ``raw_body``, and each
    says so; the nearest is the one vcrpy rejects least; played is vcrpy's play count."""
    server = serve(app)
    path = tmp_path / "chat.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        for run in ("1", "2"):
            httpx.post(
                f"{server.url}/a?session=s{run}&page=1",
                content=b'{"n": 1}',
                headers={"x-run": run, "x-tenant": "acme"},
            )
    served = len(server.seen)

    replay = tape(
        path,
        "none",
        (tenant,),
        match_on=["method", "query", "headers", "tenant", "raw_body"],
        filter_query_parameters=["session"],
    )
    replay.start()
    try:
        served_body = httpx.post(
            f"{server.url}/a?session=new&page=1",
            content=b'{"n": 1}',
            headers={"x-run": "2", "x-tenant": "acme"},
        )
        assert served_body.json()["path"] == "/a"
        with pytest.raises(agenttape.UnmatchedInteractionError) as again:
            httpx.post(
                f"{server.url}/a?session=new&page=1",
                content=b'{"n": 1}',
                headers={"x-run": "2", "x-tenant": "acme"},
            )
        with pytest.raises(agenttape.UnmatchedInteractionError) as other:
            httpx.post(
                f"{server.url}/a?session=new&page=2",
                content=b'{"n":1}',
                headers={"x-run": "1", "x-tenant": "globex"},
            )
    finally:
        replay.stop()
    assert len(server.seen) == served

    # Played by vcrpy's count: the nearest is the one played, which it says.
    first = again.value.candidates[0]
    assert (first.index, first.played, first.differences) == (1, True, [])
    assert "allow_playback_repeats=True serves the last one again" in str(again.value)
    assert "#1 POST" in str(again.value).split("Nearest recorded requests:")[1].split("\n")[1]

    candidates = other.value.candidates
    assert [c.index for c in candidates] == [0, 1]  # #1 fails headers too (x-run)
    nearest = candidates[0].differences
    assert nearest[0].startswith("match_on query: ")
    assert "  url.query.page: expected '1', got '2'" in nearest
    assert not any("session" in line for line in nearest)  # filtered alike: no difference
    assert "match_on headers: " in "\n".join(nearest)
    assert "  headers.x-tenant: expected 'acme', got 'globex'" in nearest
    assert "match_on tenant: another tenant" in nearest
    assert any(line.startswith("match_on raw_body: ") for line in nearest)
    assert str(candidates[0]).count("\n") == len(nearest)  # no "identical request"


def test_an_empty_path_matches_as_vcrpy_matches_it(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """vcrpy 9.4's ``uri`` and ``path`` take a bare host as the host with "/" (httpx records
    ``https://host`` bare); the drop-in serves what vcrpy's own verdict accepts, in every
    supported vcrpy."""
    from vcr import matchers
    from vcr.request import Request as VcrRequest

    server = serve(app)
    path = tmp_path / "root.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        recorded = httpx.get(f"{server.url}/").content
    document = json.loads(path.read_text())
    document["interactions"][0]["request"]["uri"] = server.url  # as httpx recorded it bare
    path.write_text(json.dumps(document))
    bare, slash = (VcrRequest("GET", url, b"", {}) for url in (server.url, f"{server.url}/"))
    accepts = matchers.requests_match(slash, bare, [matchers.uri, matchers.path])

    for match_on in (["method", "uri"], ["method", "path"]):
        replay = tape(path, "none", match_on=match_on)
        replay.start()
        try:
            if accepts:
                assert httpx.get(f"{server.url}/").content == recorded
            else:
                with pytest.raises(agenttape.UnmatchedInteractionError, match="match_on"):
                    httpx.get(f"{server.url}/")
        finally:
            replay.stop()


def test_what_agenttape_redacted_matches_under_vcrpys_matchers(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """The drop-in's recordings are stored redacted (an ``api_key`` in the query, the
    ``Authorization`` header): ``uri``, ``query`` and ``headers`` compare the request sent
    redacted alike, so it replays; a miss shows neither secret."""
    server = serve(app)
    path = tmp_path / "keyed.json"
    url = f"{server.url}/v1/models?api_key=secret-in-query"
    headers = {"Authorization": "Bearer sk-secret-in-header", "x-run": "1"}
    options: dict[str, Any] = {"match_on": ["method", "uri", "query", "headers"]}
    recording = tape(path, "once", **options)
    recording.start()
    try:
        recorded = httpx.get(url, headers=headers).content
    finally:
        recording.stop()
    stored = path.with_suffix(".msgpack").read_bytes()
    assert b"secret-in" not in stored
    served = len(server.seen)

    replay = tape(path, "none", **options)
    replay.start()
    try:
        assert httpx.get(url, headers=headers).content == recorded
        with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
            httpx.get(url, headers={**headers, "x-run": "2"})
    finally:
        replay.stop()
    assert len(server.seen) == served
    message = str(miss.value)
    assert "secret-in" not in message
    assert "  headers.x-run: expected '1', got '2'" in miss.value.candidates[0].differences


def test_a_method_vcrpy_recorded_as_the_caller_wrote_it_matches_as_under_vcrpy(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """aiohttp sends ``post`` as ``POST``, but vcrpy's aiohttp stubs record (and match) the
    method as the caller wrote it, as google-genai's async client writes it. Under a
    ``match_on`` without the query, two uploads to one path told apart by their method's
    spelling alone must each get their own answer, as under vcrpy."""
    import asyncio

    import aiohttp

    server = serve(lambda seen: json_reply({"method": seen.method, "query": seen.query}))
    path = tmp_path / "upload.json"

    async def upload() -> list[bytes]:
        async with aiohttp.ClientSession() as session:
            answers = []
            for method, query in (("post", "start"), ("POST", "upload_id=1"), ("put", "x")):
                async with session.request(method, f"{server.url}/files?{query}") as answer:
                    answers.append(await answer.read())
            return answers

    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        recorded = asyncio.run(upload())
    methods = [i["request"]["method"] for i in json.loads(path.read_text())["interactions"]]
    served = len(server.seen)

    replay = tape(path, "none", match_on=["method", "scheme", "host", "port", "path"])
    replay.start()
    try:
        replayed = asyncio.run(upload())
    finally:
        replay.stop()
    assert len(server.seen) == served
    assert methods == ["post", "POST", "put"]
    assert replayed == recorded
    assert [json.loads(body)["query"] for body in replayed] == [
        [["start", ""]],
        [["upload_id", "1"]],
        [["x", ""]],
    ]
