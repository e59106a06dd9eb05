"""Modes, activation forms and persistence of a cassette."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
import stat
import traceback
import tracemalloc
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._core import files
from agenttape._core.meta import new_header
from agenttape._core.wire import codec
from tests.servers import Server, json_reply, sse_reply


@pytest.fixture
def counter(serve: Any) -> Server:
    """Answers each request with how many it has seen, so live and replayed answers differ."""
    server: Server = serve(lambda seen: json_reply({"path": seen.path, "n": len(server.seen)}))
    return server


def get(server: Server, path: str = "/") -> Any:
    return httpx.get(f"{server.url}{path}").json()


def test_mode_none_requires_the_file(cassette_path: Path) -> None:
    with (
        pytest.raises(agenttape.CassetteNotFoundError, match="does not exist"),
        agenttape.use_cassette(cassette_path),
    ):
        pass
    assert not cassette_path.exists()


def test_the_missing_cassette_error_names_every_way_to_record(cassette_path: Path) -> None:
    with pytest.raises(agenttape.CassetteNotFoundError) as caught:
        agenttape.use_cassette(cassette_path).start()
    for way in ("AGENTTAPE_MODE=once", "pytest --agenttape-record", "agenttape run --mode once"):
        assert way in str(caught.value)


def test_a_recording_that_captured_nothing_leaves_no_file_so_the_next_run_records(
    counter: Server, cassette_path: Path
) -> None:
    # The first attempt fails before its first request, as an SDK without an API key does.
    with (
        pytest.warns(UserWarning, match="nothing was recorded.*no cassette was written"),
        pytest.raises(RuntimeError),
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        raise RuntimeError("The api_key client option must be set")
    assert not cassette_path.exists()
    with agenttape.use_cassette(cassette_path, mode="once"):
        assert get(counter, "/a") == {"path": "/a", "n": 1}
    with agenttape.use_cassette(cassette_path, mode="once"):
        assert get(counter, "/a") == {"path": "/a", "n": 1}  # replayed: the server saw one
    assert len(counter.seen) == 1


def test_an_empty_cassette_replays_as_empty_and_says_why(
    counter: Server, cassette_path: Path
) -> None:
    """An empty cassette (saved on purpose, or left by an earlier version) still blocks the
    network; a miss says the recording captured nothing and how to record again."""
    agenttape.Cassette(cassette_path, mode="all").save()
    before = cassette_path.read_bytes()
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        get(counter, "/a")
    message = str(caught.value)
    assert "(mode 'once', 0 interactions)" in message
    assert "holds no interactions at all" in message and "captured nothing" in message
    assert "pytest --agenttape-record" in message and "agenttape run --mode all" in message
    assert not counter.seen and cassette_path.read_bytes() == before


def test_once_records_when_missing_then_only_replays(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once") as tape:
        assert get(counter, "/a") == {"path": "/a", "n": 1}
    assert tape.mode == "once" and len(tape.interactions) == 1
    with agenttape.use_cassette(cassette_path, mode="once") as tape:
        assert get(counter, "/a") == {"path": "/a", "n": 1}
        with pytest.raises(agenttape.UnmatchedInteractionError):
            get(counter, "/b")
    assert len(counter.seen) == 1
    assert len(agenttape.load(cassette_path).interactions) == 1


def test_new_episodes_replays_hits_and_appends_misses(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/a")
    with agenttape.use_cassette(cassette_path, mode="new_episodes") as tape:
        assert get(counter, "/a") == {"path": "/a", "n": 1}
        assert get(counter, "/b") == {"path": "/b", "n": 2}
    assert tape.play_count == 2
    counter.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        assert get(counter, "/a")["n"] == 1
        assert get(counter, "/b")["n"] == 2
    assert [i.request.url.rsplit("/", 1)[1] for i in tape.interactions] == ["a", "b"]


def test_all_rerecords_everything(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/a")
        get(counter, "/b")
    with agenttape.use_cassette(cassette_path, mode="all"):
        assert get(counter, "/a")["n"] == 3
    interactions = agenttape.load(cassette_path).interactions
    assert len(interactions) == 1
    assert interactions[0].response is not None
    assert b'"n": 3' in interactions[0].response.body


def test_mode_from_environment_overrides(
    counter: Server, cassette_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTTAPE_MODE", "all")
    with agenttape.use_cassette(cassette_path) as tape:
        get(counter)
    assert tape.mode == "all"
    monkeypatch.setenv("AGENTTAPE_MODE", "sometimes")
    with (
        pytest.raises(ValueError, match="AGENTTAPE_MODE: 'sometimes' is not a mode"),
        agenttape.use_cassette(cassette_path),
    ):
        pass
    monkeypatch.setenv("AGENTTAPE_MODE", "record")
    with agenttape.use_cassette(cassette_path) as tape:
        get(counter)
    assert tape.mode == "all"


def test_bad_options_are_rejected(cassette_path: Path) -> None:
    with pytest.raises(ValueError, match="'sometimes' is not a mode"):
        agenttape.use_cassette(cassette_path, mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_unused"):
        agenttape.use_cassette(cassette_path, on_unused="maybe")
    with pytest.raises(ValueError, match="match_on"):
        agenttape.use_cassette(cassette_path, match_on=["colour"])


def test_decorator_on_sync_and_async_functions(counter: Server, tmp_path: Path) -> None:
    sync_path, async_path = tmp_path / "sync.msgpack", tmp_path / "async.msgpack"

    @agenttape.use_cassette(sync_path, mode="once")
    def sync_agent() -> Any:
        return get(counter, "/sync")

    @agenttape.use_cassette(async_path, mode="once")
    async def async_agent() -> Any:
        async with httpx.AsyncClient() as client:
            return (await client.get(f"{counter.url}/async")).json()

    import asyncio

    first = sync_agent(), asyncio.run(async_agent())
    counter.stop()
    second = sync_agent(), asyncio.run(async_agent())
    assert first == second == ({"path": "/sync", "n": 1}, {"path": "/async", "n": 2})
    assert sync_path.exists() and async_path.exists()


def test_cassette_attributes_and_load(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once", tags={"user_id": "u_1"}):
        get(counter, "/a")
        get(counter, "/b")
    loaded = agenttape.load(cassette_path)
    assert loaded.path == cassette_path
    assert len(loaded.interactions) == 2
    assert loaded.metadata["tags"] == {"user_id": "u_1"}
    assert loaded.metadata["agenttape_version"] == agenttape.__version__
    assert loaded.play_count == 0 and not loaded.all_played
    with agenttape.use_cassette(cassette_path) as tape:
        get(counter, "/b")
        assert tape.play_count == 1
        assert not tape.all_played
        assert [i.request.url for i in tape.unplayed] == [f"{counter.url}/a"]
        get(counter, "/a")
        assert tape.all_played and tape.unplayed == []
    interaction = loaded.interactions[0]
    assert interaction.boundary == "http"
    assert interaction.started.year >= 2024
    assert interaction.ttfb is not None and interaction.duration is not None


def test_nested_cassettes_innermost_wins(counter: Server, tmp_path: Path) -> None:
    outer, inner = tmp_path / "outer.msgpack", tmp_path / "inner.msgpack"
    with agenttape.use_cassette(outer, mode="once"):
        get(counter, "/outer")
        with agenttape.use_cassette(inner, mode="once"):
            get(counter, "/inner")
        get(counter, "/outer-again")
    assert [i.request.url[-6:] for i in agenttape.load(inner).interactions] == ["/inner"]
    assert len(agenttape.load(outer).interactions) == 2


def test_interactions_are_written_when_the_block_raises(
    counter: Server, cassette_path: Path
) -> None:
    with pytest.raises(RuntimeError), agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/before-crash")
        raise RuntimeError("agent crashed")
    assert len(agenttape.load(cassette_path).interactions) == 1


def test_write_is_atomic_and_leaves_no_temporary_files(
    counter: Server, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter)
    assert sorted(p.name for p in cassette_path.parent.iterdir()) == [cassette_path.name]


def test_unwritable_location_raises_write_error(counter: Server, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with (
        pytest.raises(agenttape.CassetteWriteError, match="cannot write cassette"),
        agenttape.use_cassette(blocker / "tape.msgpack", mode="once"),
    ):
        get(counter)


def test_replay_in_mode_none_never_rewrites_the_file(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter)
    before = hashlib.sha256(cassette_path.read_bytes()).hexdigest()
    mtime = cassette_path.stat().st_mtime_ns
    with agenttape.use_cassette(cassette_path):
        get(counter)
    assert hashlib.sha256(cassette_path.read_bytes()).hexdigest() == before
    assert cassette_path.stat().st_mtime_ns == mtime


def test_on_unused_fail_and_warn(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/used")
        get(counter, "/dropped")
    with (
        pytest.raises(agenttape.AgentTapeError, match="never played"),
        agenttape.use_cassette(cassette_path, on_unused="fail"),
    ):
        get(counter, "/used")
    with (
        pytest.warns(UserWarning, match="/dropped"),
        agenttape.use_cassette(cassette_path, on_unused="warn"),
    ):
        get(counter, "/used")


def test_requests_outside_any_cassette_are_untouched(counter: Server, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        pass
    assert get(counter) == {"path": "/", "n": 1}
    assert not cassette_path.exists()  # nothing recorded leaves no file


def test_new_cassette_gets_the_umask_mode_and_a_rewrite_keeps_the_mode(
    counter: Server, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        get(counter)
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(cassette_path.stat().st_mode) == 0o666 & ~umask
    cassette_path.chmod(0o640)
    with agenttape.use_cassette(cassette_path, mode="all"):
        get(counter)
    assert stat.S_IMODE(cassette_path.stat().st_mode) == 0o640


def test_the_umask_is_the_one_in_force_when_the_cassette_is_written(
    counter: Server, cassette_path: Path, tmp_path: Path
) -> None:
    """A process that tightens its umask after importing agenttape gets private files."""
    before = os.umask(0o077)
    try:
        with agenttape.use_cassette(cassette_path, mode="all"):
            get(counter)
        recorder = agenttape.Recorder(tmp_path / "runs", keep="all")
        with recorder.run() as run:
            get(counter)
        recorder.close(timeout=10)
    finally:
        os.umask(before)
    assert stat.S_IMODE(cassette_path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "runs" / run.path).stat().st_mode) == 0o600


def test_a_cassette_reached_through_a_symlink_is_written_where_it_points(
    counter: Server, tmp_path: Path
) -> None:
    target = tmp_path / "shared" / "tape.msgpack"
    target.parent.mkdir()
    link = tmp_path / "tape.msgpack"
    link.symlink_to(target)
    with agenttape.use_cassette(link, mode="all"):
        get(counter)
    assert link.is_symlink() and target.is_file()
    assert len(agenttape.load(link).interactions) == 1


@pytest.mark.parametrize("links", [True, False], ids=["hard-link", "no-links"])
def test_a_rerecording_keeps_the_old_file_as_previous_without_copying_it(
    counter: Server, cassette_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    """The old cassette is linked to ``.previous`` (its bytes are not read and written
    again); on a file system without hard links it is copied."""
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/old")
    before = cassette_path.read_bytes()
    # Held open, the old file keeps its number: a copy cannot be given it.
    held = cassette_path.open("rb")
    if not links:

        def no_link(*args: Any, **kwargs: Any) -> None:
            raise PermissionError("hard links not supported")

        monkeypatch.setattr(os, "link", no_link)
    with held, agenttape.use_cassette(cassette_path, mode="all"):
        get(counter, "/new")
        inode = os.fstat(held.fileno()).st_ino
    previous = cassette_path.with_name(cassette_path.stem + ".previous.msgpack")
    assert previous.read_bytes() == before
    assert cassette_path.read_bytes() != before
    assert (previous.stat().st_ino == inode) is links
    assert sorted(p.name for p in cassette_path.parent.iterdir()) == sorted(
        [cassette_path.name, previous.name]
    )


def test_a_save_that_fails_midway_leaves_the_file_it_replaces_untouched(
    counter: Server, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/kept")
    before = cassette_path.read_bytes()
    cassette = agenttape.use_cassette(cassette_path, mode="all")
    with pytest.raises(TypeError, match="not msgpack-serialisable"), cassette:
        get(counter, "/first")
        get(counter, "/second")
        # The second interaction cannot be written: the first piece is already out.
        cassette.interactions[1].started_at = object()  # type: ignore[assignment]
    assert cassette_path.read_bytes() == before
    assert sorted(p.name for p in cassette_path.parent.iterdir()) == [cassette_path.name]


def test_record_is_all_and_record_mode_is_mode(counter: Server, cassette_path: Path) -> None:
    for options in ({"mode": "record"}, {"record_mode": "all"}, {"record_mode": "record"}):
        with agenttape.use_cassette(cassette_path, **options) as tape:
            assert get(counter) == {"path": "/", "n": len(counter.seen)}
        assert tape.mode == "all"
    assert len(counter.seen) == 3  # each one recorded anew
    with agenttape.use_cassette(cassette_path, record_mode="none") as tape:
        assert get(counter) == {"path": "/", "n": 3}
    assert len(counter.seen) == 3


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("rewrite", "all"), ("always", "all"), ("recrod", "all"), ("onse", "once"),
     ("new-episodes", "new_episodes"), ("replay", "none")],
)  # fmt: skip
def test_an_unknown_mode_names_the_modes_and_the_closest(
    cassette_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str, meant: str
) -> None:
    expected = (
        f"{typed!r} is not a mode; the modes are none, once, new_episodes, all "
        f"('record' is accepted for 'all'); did you mean {meant!r}?"
    )
    with pytest.raises(ValueError) as caught:
        agenttape.use_cassette(cassette_path, mode=typed)  # type: ignore[arg-type]
    assert str(caught.value) == expected
    monkeypatch.setenv("AGENTTAPE_MODE", typed)
    with pytest.raises(ValueError) as caught, agenttape.use_cassette(cassette_path):
        pass
    assert str(caught.value) == f"AGENTTAPE_MODE: {expected}"


def test_mode_is_exported_as_the_type_of_the_modes() -> None:
    assert "Mode" in agenttape.__all__
    assert typing.get_args(agenttape.Mode) == ("none", "once", "new_episodes", "all")


def test_public_exceptions_report_the_module_users_import_them_from() -> None:
    for name in agenttape.__all__:
        value = getattr(agenttape, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert value.__module__ == "agenttape", name
    assert "agenttape.UnmatchedInteractionError" in "".join(
        traceback.format_exception_only(
            agenttape.UnmatchedInteractionError(
                "m", request=agenttape.Request("GET", "/"), candidates=[], cassette_path="",
                mode="none",
            )
        )
    )  # fmt: skip


def test_a_recording_cut_short_says_so_in_the_file_and_in_a_later_miss(
    counter: Server, cassette_path: Path
) -> None:
    with (
        pytest.raises(KeyboardInterrupt),
        agenttape.use_cassette(cassette_path, mode="once") as tape,
    ):
        for i in range(20):
            get(counter, f"/step?i={i}")
            if i == 2:
                raise KeyboardInterrupt  # Ctrl-C, as the signal's default handler raises it
    assert tape.metadata["interrupted"] == {"after": 3, "by": "KeyboardInterrupt"}
    assert agenttape.load(cassette_path).metadata["interrupted"] == {
        "after": 3,
        "by": "KeyboardInterrupt",
    }
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        for i in range(20):
            get(counter, f"/step?i={i}")
    assert (
        "This cassette's recording was cut short (interrupted by KeyboardInterrupt after "
        "3 interactions): what the code did after that was never recorded. Record it again "
        "to the end."
    ) in str(caught.value)
    assert len(counter.seen) == 3
    # Appending the rest to the end clears the mark; so does recording anew.
    with agenttape.use_cassette(cassette_path, mode="new_episodes"):
        for i in range(5):
            get(counter, f"/step?i={i}")
    assert "interrupted" not in agenttape.load(cassette_path).metadata
    with pytest.raises(RuntimeError), agenttape.use_cassette(cassette_path, mode="all"):
        get(counter, "/again")
        raise RuntimeError("the agent crashed")
    assert agenttape.load(cassette_path).metadata["interrupted"] == {
        "after": 1,
        "by": "RuntimeError",
    }
    with agenttape.use_cassette(cassette_path, mode="all"):
        get(counter, "/again")
    assert "interrupted" not in agenttape.load(cassette_path).metadata


def test_a_replay_that_raises_does_not_mark_the_cassette(
    counter: Server, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/a")
    before = cassette_path.read_bytes()
    with pytest.raises(RuntimeError), agenttape.use_cassette(cassette_path, mode="once"):
        get(counter, "/a")
        raise RuntimeError("after the replay")
    assert cassette_path.read_bytes() == before


@pytest.mark.parametrize("mode", ["once", "all", "new_episodes"])
def test_an_unwritable_path_fails_on_entering_before_any_live_call(
    counter: Server, tmp_path: Path, mode: str
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"a file where the cassette's folder should be")
    path = blocker / "cassettes" / "agent.msgpack"
    with (
        pytest.raises(agenttape.CassetteWriteError) as caught,
        agenttape.use_cassette(path, mode=mode),  # type: ignore[arg-type]
    ):
        get(counter)
    assert str(caught.value).startswith(f"cannot write cassette {path}: ")
    assert "Nothing was recorded" in str(caught.value)
    assert counter.seen == []
    assert os.listdir(tmp_path) == ["not-a-folder"]


def test_a_missing_folder_is_created_when_recording_starts(counter: Server, tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "agent.msgpack"
    with agenttape.use_cassette(path, mode="once"):
        assert path.parent.is_dir()
        assert os.listdir(path.parent) == []  # the probe leaves nothing behind
        get(counter)
    assert path.exists()


def test_a_large_cassette_replays_holding_little_more_than_it_recorded(
    serve: Any, cassette_path: Path
) -> None:
    """Replaying 20,000 recorded calls once held 4.6 times the bytes they recorded (URL,
    headers, bodies): each request's match key was kept whole (its URL's parts, a copy of
    each), each "GET", "OK" and "HTTP/1.1" was a string of its own."""
    size = 3000
    server = serve(
        lambda seen: json_reply(
            {"path": seen.path, "pad": "x" * 200}, headers=[("X-Request-Id", seen.path)]
        )
    )
    with agenttape.use_cassette(cassette_path, mode="all"):
        httpx.get(f"{server.url}/item/0?page=0")
    [template] = agenttape.load(cassette_path).interactions
    assert template.response is not None
    interactions = []
    for i in range(size):
        body = template.response.body.replace(b'"/item/0"', f'"/item/{i}"'.encode())
        response = dataclasses.replace(
            template.response,
            headers=[
                (name, str(len(body)) if name.lower() == "content-length" else value)
                for name, value in template.response.headers
                if name != "X-Request-Id"
            ]
            + [("X-Request-Id", f"req_{i:06d}")],
            body=body,
            chunks=[(len(body), template.response.chunks[0][1] + i / 1e6)],
        )
        request = dataclasses.replace(template.request, url=f"{server.url}/item/{i}?page={i}")
        interactions.append(dataclasses.replace(template, request=request, response=response))
    files.write_atomic(cassette_path, codec.encode(new_header(), interactions))
    recorded = sum(
        len(i.request.url)
        + len(i.response.body)
        + sum(len(n) + len(v) for n, v in [*i.request.headers, *i.response.headers])
        for i in interactions
        if i.response is not None
    )
    del interactions, template, request, response
    cassette = agenttape.use_cassette(cassette_path)
    gc.collect()
    tracemalloc.start()
    try:
        cassette.start()  # read, and the lookups built, as for the first request
        try:
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
        finally:
            cassette.stop()
    finally:
        tracemalloc.stop()
    assert held < 4 * recorded, (
        f"{held / size:.0f} B held per interaction, {recorded / size:.0f} recorded"
    )
    with agenttape.use_cassette(cassette_path):
        for i in (0, size // 2, size - 1):
            assert httpx.get(f"{server.url}/item/{i}?page={i}").json()["path"] == f"/item/{i}"
    assert len(server.seen) == 1


def test_a_miss_after_a_cut_stream_names_the_fault_that_used_the_recording(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """A fault that changes the recorded answer (a cut stream) uses it up: a retry of the
    same request then misses, and the candidate says the fault played it, not the code."""
    server = serve(lambda seen: sse_reply([b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]))
    path = tmp_path / "stream.msgpack"
    url = f"{server.url}/v1/stream"
    with agenttape.use_cassette(path, mode="once"), httpx.stream("POST", url, json={"q": 1}) as r:
        assert b"".join(r.iter_bytes()).count(b"data:") == 3
    cut = agenttape.fault("cut_stream", after_chunks=1)
    with agenttape.use_cassette(path, faults=[cut]):
        with pytest.raises(httpx.HTTPError), httpx.stream("POST", url, json={"q": 1}) as r:
            b"".join(r.iter_bytes())
        with pytest.raises(agenttape.UnmatchedInteractionError) as miss:
            httpx.post(url, json={"q": 1})
    candidate = miss.value.candidates[0]
    assert (candidate.index, candidate.played, candidate.differences) == (0, True, [])
    assert candidate.note.startswith("played by the injected fault cut_stream")
    assert candidate.note in str(miss.value)


def test_a_replay_loads_no_more_than_it_needs(counter: Server, tmp_path: Path) -> None:
    """A process that loads a cassette and replays from it never reaches the fault machinery,
    OpenSSL (only ``new_episodes`` compares the file's digest) or the alternation of every
    credential shape (compiled once a probe finds a head): they cost a fresh process about
    ten milliseconds before its first request."""
    import subprocess
    import sys

    path = tmp_path / "replayed.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        httpx.get(counter.url + "/a?q=1", headers={"x-trace": "plain"})
    script = (
        "import sys, agenttape\n"
        "before = set(sys.modules)\n"
        f"agenttape.load({str(path)!r})\n"
        "heavy = {'hashlib', '_hashlib', 'uuid', 'email.utils', 'agenttape._core.faults'}\n"
        "print(sorted((set(sys.modules) - before) & heavy))\n"
        "import httpx\n"
        "from agenttape._core.secrets import secret_bytes_regex, secret_regex\n"
        f"with agenttape.use_cassette({str(path)!r}):\n"
        f"    assert httpx.get({counter.url + '/a?q=1'!r}, headers={{'x-trace': 'plain'}}).text\n"
        "print('agenttape._core.faults' in sys.modules, secret_regex.cache_info().currsize,\n"
        "      secret_bytes_regex.cache_info().currsize)\n"
    )
    counter.stop()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "False", "0", "0"]
