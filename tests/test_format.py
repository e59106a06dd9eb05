"""Reading cassettes: every damaged or foreign file is reported and left exactly as it was."""

from __future__ import annotations

import copy
import dataclasses
import gc
import hashlib
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx
import msgpack
import pytest
import vcr
from hypothesis import given
from hypothesis import strategies as st
from websockets.sync.client import connect as connect_websocket

import agenttape
from agenttape._core.models import Failure, Interaction, Request, Response
from agenttape._core.wire.bounded_msgpack import Invalid
from agenttape._core.wire.checked_read import decode_interaction
from agenttape._core.wire.codec import (
    FORMAT_VERSION,
    PLAIN_FORMAT,
    decode,
    decode_stream,
    encode,
    encode_pieces,
)
from agenttape._core.wire.fast_read import SharedPairs, decode_plain
from tests.cli_support import cli
from tests.servers import Server, WebSocketServer, json_reply, refused_port

FORMAT_DOC = Path(__file__).resolve().parent.parent / "docs" / "format.md"


def sample() -> list[Interaction]:
    return [
        Interaction(
            request=Request(
                "POST",
                "https://api.test/v1?a=1",
                [("X-A", "1"), ("x-a", "2")],
                b"\x00\xff",
                chunks=[(1, 0.0), (1, 0.015)],
            ),
            response=Response(
                status=429,
                reason="Too Many Requests",
                http_version="HTTP/1.1",
                headers=[("Retry-After", "1"), ("Content-Encoding", "gzip")],
                body=b'{"error": {"mess',
                chunks=[(10, 0.01), (6, 0.02)],
                truncated=True,
                trailers=[("grpc-status", "8"), ("x-cost", "3")],
            ),
            started_at=1_700_000_000.5,
            ttfb=0.01,
            duration=0.02,
        ),
        Interaction(
            request=Request("GET", "https://api.test/down"),
            error=Failure("connect_error", "ConnectError", "refused"),
        ),
    ]


def test_round_trip_keeps_every_byte() -> None:
    header = {"agenttape_version": agenttape.__version__, "tags": {"k": [1, 2]}}
    decoded_header, decoded = decode(encode(header, sample()), "x.msgpack")
    assert decoded_header == header
    assert decoded == sample()


def write_and_open(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    with pytest.raises(agenttape.CassetteFormatError) as error:
        agenttape.load(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    message = str(error.value)
    assert str(path) in message
    return message


def test_empty_file(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    assert "empty" in write_and_open(cassette_path, b"")


def test_truncated_file(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    data = encode({}, sample())
    assert "truncated" in write_and_open(cassette_path, data[: len(data) // 2])


def test_foreign_files(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    assert "not" in write_and_open(cassette_path, b"interactions:\n- request: {}\n")
    assert "no format marker" in write_and_open(cassette_path, msgpack.packb({"x": 1}))
    assert "not an agenttape cassette" in write_and_open(cassette_path, msgpack.packb([1, 2, 3]))
    assert "JSON" in write_and_open(cassette_path, b'{"log": {"entries": []}}')


def test_wrong_types_inside(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    document = msgpack.unpackb(encode({}, sample()))
    document["interactions"][0]["response"]["body"] = "text, not bytes"
    message = write_and_open(cassette_path, msgpack.packb(document, use_bin_type=True))
    assert "interaction 0" in message and "response.body" in message


def test_newer_format_names_the_version_that_reads_it(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    document = {
        "agenttape": FORMAT_VERSION + 1,
        "header": {"agenttape_version": "9.0.0"},
        "interactions": [],
    }
    message = write_and_open(cassette_path, msgpack.packb(document))
    assert f"format {FORMAT_VERSION + 1}" in message
    assert "agenttape 9.0.0" in message and "upgrade" in message


def test_damaged_cassette_is_never_overwritten(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    damaged = encode({}, sample())[:-7]
    cassette_path.write_bytes(damaged)
    for mode in ("none", "once", "new_episodes", "all"):
        with (
            pytest.raises(agenttape.CassetteFormatError),
            agenttape.use_cassette(cassette_path, mode=mode),
        ):
            pass
        assert cassette_path.read_bytes() == damaged


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(agenttape.CassetteFormatError, match="directory"):
        agenttape.load(tmp_path)


def test_reading_never_runs_code(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    # An ext type, as a pickle-based format would embed: refused, not executed.
    payload = msgpack.packb({"agenttape": 1, "header": msgpack.ExtType(42, b"cos\nsystem\n")})
    assert "header" in write_and_open(cassette_path, payload)


ODD_VALUES = [None, True, False, 0, -1, 7, 1.5, "", "x", b"", b"x", [], {}, ["a"], ["a", "b"]]
ODD_VALUES += [[1, 2], [["a", "b"]], [["a", 1]], [["a"]], [[1, 0.5]], [[-1, 0.5]], [[True, 0.0]]]
ODD_VALUES += [[[99, 0.1]], [(1, 0.5)], {"kind": "k", "type": "T"}, {"status": 200}]
ODD_VALUES += [-0.0, -1.5, float("nan"), float("inf"), 1e300, -1e300, 2**63, [[1, float("nan")]]]
ODD_VALUES += [[[1, -0.5]], [[1, float("inf")]]]
ODD_VALUES += [[["X-A", "1"], ["a", 1]], [["X-A", "1"], {"a": "b"}], [[{"a": "b"}, "c"]]]
FIELDS = [
    (),
    ("boundary",),
    ("started_at",),
    ("ttfb",),
    ("duration",),
    ("request",),
    ("request", "method"),
    ("request", "url"),
    ("request", "headers"),
    ("request", "body"),
    ("request", "chunks"),
    ("response",),
    ("response", "status"),
    ("response", "reason"),
    ("response", "http_version"),
    ("response", "headers"),
    ("response", "body"),
    ("response", "chunks"),
    ("response", "truncated"),
    ("response", "trailers"),
    ("error",),
    ("error", "kind"),
    ("error", "type"),
    ("error", "message"),
    ("injected",),
]


def changed(which: int, changes: list[tuple[tuple[str, ...], int]]) -> object:
    """A sample interaction as read from the file, with fields replaced (-1 removes one)."""
    raw = msgpack.unpackb(encode({}, sample()), raw=False)["interactions"][which]
    for path, choice in changes:
        target = raw
        for key in path[:-1]:
            target = target.get(key) if isinstance(target, dict) else None
        if not path:
            raw = copy.deepcopy(ODD_VALUES[choice]) if choice >= 0 else raw
        elif not isinstance(target, dict):
            continue
        elif choice < 0:
            target.pop(path[-1], None)
        else:
            # A copy: the same list or dict set twice would nest in itself.
            target[path[-1]] = copy.deepcopy(ODD_VALUES[choice])
    return raw


def as_streamed(value: object) -> object:
    """``value`` as the streaming reader gives it: arrays as tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(as_streamed(item) for item in value)
    if isinstance(value, dict):
        return {key: as_streamed(item) for key, item in value.items()}
    return value


def pairs_seen_before() -> SharedPairs:
    """What the reader has kept after the sample's entries: every header pair they hold."""
    seen = SharedPairs(1 << 20)
    for interaction in sample():
        response = interaction.response
        response_headers = [*response.headers, *response.trailers] if response else []
        for pair in [*interaction.request.headers, *response_headers]:
            seen[pair] = pair
    return seen


def agree(raw: object) -> None:
    """The fast path either declines or builds exactly what the checked path builds; whatever
    the checked path rejects, the fast path declines, so every error message stays the same.
    Both readers' forms are tried, with no header pairs seen before and with the sample's."""
    for form in (raw, as_streamed(raw)):
        try:
            checked = decode_interaction(form)
        except Invalid:
            checked = None
        for seen in (SharedPairs(1 << 20), pairs_seen_before(), SharedPairs(0)):
            fast = decode_plain(form, seen)
            assert fast is None or fast == checked, form


def test_fast_decoding_agrees_on_every_single_odd_field() -> None:
    for which in (0, 1):
        for path in FIELDS:
            for choice in range(-1, len(ODD_VALUES)):
                agree(changed(which, [(path, choice)]))


@given(
    which=st.integers(0, 1),
    changes=st.lists(
        st.tuples(st.sampled_from(FIELDS), st.integers(-1, len(ODD_VALUES) - 1)), max_size=4
    ),
)
def test_fast_decoding_agrees_on_combined_odd_fields(
    which: int, changes: list[tuple[tuple[str, ...], int]]
) -> None:
    agree(changed(which, changes))


def test_fast_decoding_takes_ordinary_interactions() -> None:
    for raw in msgpack.unpackb(encode({}, sample()), raw=False)["interactions"]:
        assert decode_plain(raw, SharedPairs(1 << 20)) == decode_interaction(raw)


def stream(path: Path) -> object:
    with path.open("rb") as handle:
        return decode_stream(handle)


def test_streamed_reading_gives_what_whole_reading_gives(cassette_path: Path) -> None:
    cassette_path.parent.mkdir(parents=True)
    data = encode({"tags": {"k": [1, 2]}}, sample() * 3)
    cassette_path.write_bytes(data)
    assert stream(cassette_path) == decode(data, cassette_path)


def test_a_header_pair_repeated_across_entries_is_kept_once(cassette_path: Path) -> None:
    """Loading a long cassette costs memory for its distinct header pairs, not for every copy."""
    cassette_path.parent.mkdir(parents=True)
    cassette_path.write_bytes(encode({}, sample() * 3))
    loaded = stream(cassette_path)
    assert loaded is not None
    first, _, second, _, third, _ = loaded[1]
    assert first.response is not None and third.response is not None
    for later in (second, third):
        assert later.request.headers == first.request.headers
        assert all(
            a is b for a, b in zip(later.request.headers, first.request.headers, strict=True)
        )
    assert all(a is b for a, b in zip(third.response.headers, first.response.headers, strict=True))


def test_streamed_reading_declines_what_it_does_not_know(cassette_path: Path) -> None:
    """Every odd file goes to the whole reading, whose errors name the problem."""
    cassette_path.parent.mkdir(parents=True)
    data = encode({}, sample())
    document = msgpack.unpackb(data, raw=False)
    reordered = {key: document[key] for key in ("header", "agenttape", "interactions")}
    newer = {**document, "agenttape": FORMAT_VERSION + 1}
    odd = document["interactions"][0]["response"]
    odd["status"] = True
    for content in (
        b"",
        data[:-1],
        data + b"\x00",
        msgpack.packb(reordered, use_bin_type=True),
        msgpack.packb(newer, use_bin_type=True),
        msgpack.packb({**document, "extra": 1}, use_bin_type=True),
        msgpack.packb(document, use_bin_type=True),
        msgpack.packb([1, 2, 3]),
    ):
        cassette_path.write_bytes(content)
        assert stream(cassette_path) is None


@given(cut=st.integers(1, len(encode({}, sample())) - 1))
def test_a_cut_file_is_never_streamed(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    path = tmp_path_factory.mktemp("cut") / "tape.msgpack"
    path.write_bytes(encode({}, sample())[:cut])
    assert stream(path) is None
    with pytest.raises(agenttape.CassetteFormatError):
        agenttape.load(path)


def large_sample() -> list[Interaction]:
    """``sample()`` with bodies larger than the streamed reader's buffer among small ones."""
    first, failed = sample()
    assert first.response is not None
    large = dataclasses.replace(
        first,
        request=dataclasses.replace(first.request, body=bytes(range(256)) * 6000),
        response=dataclasses.replace(first.response, body=b"\x00\xff" * 3_000_000),
    )
    return [first, large, failed, large, first]


def test_streamed_reading_of_large_bodies_gives_what_whole_reading_gives(
    cassette_path: Path,
) -> None:
    cassette_path.parent.mkdir(parents=True)
    data = encode({"tags": {"k": [1, 2]}}, large_sample())
    cassette_path.write_bytes(data)
    assert stream(cassette_path) == decode(data, cassette_path)


def test_a_cassette_of_large_bodies_loads_in_little_more_than_its_size(
    cassette_path: Path,
) -> None:
    """A 200 MB cassette of 20 MB bodies once peaked at 1.18 times its size as it loaded:
    each body went through a read buffer grown to twice its size."""
    cassette_path.parent.mkdir(parents=True)
    large = large_sample()[1]
    cassette_path.write_bytes(encode({}, [large] * 8))
    size = cassette_path.stat().st_size
    gc.collect()
    tracemalloc.start()
    try:
        loaded = agenttape.load(cassette_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded.interactions == [large] * 8
    assert peak < 1.05 * size, f"peak {peak / size:.2f}x the file's size"


@pytest.mark.parametrize("kept", [0.1, 0.5, 0.9])
def test_a_cassette_cut_inside_a_large_body_is_reported(cassette_path: Path, kept: float) -> None:
    cassette_path.parent.mkdir(parents=True)
    data = encode({}, large_sample())
    assert "truncated" in write_and_open(cassette_path, data[: int(len(data) * kept)])


def test_pieces_join_to_the_whole_document_byte_for_byte() -> None:
    header = {"agenttape_version": agenttape.__version__, "tags": {"k": [1, 2]}}
    document = {
        "agenttape": PLAIN_FORMAT,  # no WebSocket session: the version older readers read
        "header": header,
        "interactions": [
            msgpack.unpackb(piece) for piece in list(encode_pieces(header, sample()))[1:]
        ],
    }
    pieces = list(encode_pieces(header, sample()))
    assert len(pieces) == 1 + len(sample())
    assert b"".join(pieces) == msgpack.packb(document, use_bin_type=True)
    assert decode(b"".join(pieces), "x.msgpack") == (header, sample())


def test_unserialisable_content_fails_while_pieces_are_produced() -> None:
    pieces = encode_pieces({"tags": {"when": object()}}, sample())
    with pytest.raises(TypeError, match="not msgpack-serialisable"):
        list(pieces)


def _field_paths(value: object, path: str) -> set[str]:
    """Every key path of a document as format.md names it: `interactions[].response.status`.
    The user's tags and the library versions are free maps, named as a whole."""
    if isinstance(value, dict) and path not in ("header.tags", "header.libraries"):
        paths = set()
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            paths |= {child} | _field_paths(item, child)
        return paths
    if isinstance(value, (list, tuple)) and path == "interactions":
        return set().union(*(_field_paths(item, "interactions[]") for item in value))
    return set()


def test_every_field_the_writers_emit_is_documented(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """docs/format.md lets another language read and write cassettes: every field that any
    writer (a recording, a boundary, a derived replay, import-vcr, the production recorder)
    puts in a file is listed there, as `path`."""
    server = serve(lambda seen: json_reply({"path": seen.path}))
    cassette = tmp_path / "tape.msgpack"

    @agenttape.boundary("lookup")
    def lookup(order: str) -> dict[str, str]:
        if order == "bad":
            raise KeyError(order)
        return {"order": order}

    with agenttape.use_cassette(cassette, mode="all", tags={"user_id": "u_1"}):
        httpx.get(f"{server.url}/ok")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{refused_port()}/down")
        lookup("A-1")
        with pytest.raises(KeyError):
            lookup("bad")
    with agenttape.use_cassette(cassette, live=[f"127.0.0.1:{server.port}"]):
        httpx.get(f"{server.url}/changed")
    derived = cassette.with_name("tape.derived.msgpack")

    source = tmp_path / "vcr.yaml"
    with vcr.VCR(record_mode="all").use_cassette(str(source)):
        httpx.get(f"{server.url}/vcr")
    imported = tmp_path / "imported.msgpack"
    assert cli("import-vcr", source, imported).returncode == 0

    recorder = agenttape.Recorder(tmp_path / "runs", keep="all", max_bytes_per_run=4096)
    with recorder.run(user_id="u_2") as run:
        for _ in range(8):
            httpx.get(f"{server.url}/big")  # more than fits: the run drops some
        run.flag("looked wrong")
    recorder.close()
    [stored] = (tmp_path / "runs").rglob("*.msgpack")

    session = tmp_path / "session.msgpack"
    with (
        WebSocketServer() as ws_server,
        agenttape.use_cassette(session, mode="all"),
        connect_websocket(ws_server.url) as ws,
    ):
        ws.recv()
        ws.send("bye")  # the server closes: closed.code, closed.reason, closed.by

    emitted: set[str] = set()
    for path in (cassette, derived, imported, stored, session):
        emitted |= _field_paths(msgpack.unpackb(path.read_bytes(), timestamp=3), "")
    for expected in (
        "header.run.dropped",
        "header.derived_from.run_id",
        "interactions[].error",
        "interactions[].frames",
        "interactions[].closed.by",
    ):
        assert expected in emitted  # the writers above did emit the optional fields
    documented = set(re.findall(r"`([a-z_\[\]\.]+)`", FORMAT_DOC.read_text()))
    assert sorted(emitted - documented) == []


def test_trailers_are_written_only_when_a_response_has_them(tmp_path: Path) -> None:
    """A gRPC call's status travels in ``response.trailers``, an optional field: a file
    without trailers is byte for byte what earlier versions wrote, and says format 1."""
    plain = Interaction(Request("GET", "https://api.test/"), Response(200, body=b"ok"))
    document = msgpack.unpackb(encode({}, [plain]), raw=False)
    assert document["agenttape"] == 1
    assert "trailers" not in document["interactions"][0]["response"]
    call = sample()[0]
    document = msgpack.unpackb(encode({}, [call]), raw=False)
    assert document["agenttape"] == 1
    assert document["interactions"][0]["response"]["trailers"] == [
        ["grpc-status", "8"],
        ["x-cost", "3"],
    ]
    path = tmp_path / "trailers.msgpack"
    path.write_bytes(encode({}, [call]))
    [read] = agenttape.load(path).interactions
    assert read.response is not None
    assert read.response.trailers == [("grpc-status", "8"), ("x-cost", "3")]
    assert "`interactions[].response.trailers`" in FORMAT_DOC.read_text()
