"""Damaged, random and hostile files: the reader answers CassetteFormatError and nothing else,
never hangs, and never needs more than a small multiple of the file's size in memory."""

from __future__ import annotations

import asyncio
import contextlib
import email.message
import gzip
import math
import pickle
import shutil
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import msgpack
import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

import agenttape
from agenttape._core.wire import bounded_msgpack, codec
from tests.cli_support import Bounded, assert_one_line_error, run_bounded
from tests.reliability.scale import properties
from tests.reliability.strategies import cassettes, document_of, values
from tests.servers import Reply, Server

# Python objects cost more than their msgpack bytes (a list of two short strings is ~6x its
# encoding); the reader refuses files that would cost more than this.
MEMORY_FACTOR = 24
MEMORY_SLACK = 512 * 1024

# A generous deadline still catches a reader that hangs.
hostile = settings(properties(150, 1500), deadline=timedelta(seconds=10))


def least_peak(read: Callable[[], object], bound: int) -> int:
    """The least tracemalloc peak of up to three ``read()`` calls, stopping at one within
    ``bound``: tracemalloc counts every thread's allocations, and the interpreter fills
    one-time caches on some error paths, while a reader that blows up does so every time."""
    peaks: list[int] = []
    while len(peaks) < 3 and (not peaks or min(peaks) > bound):
        tracemalloc.start()
        try:
            read()
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    return min(peaks)


def read_bounded(data: bytes) -> BaseException | None:
    """Decodes ``data``; returns the error, asserting its type and the memory it took."""
    errors: list[BaseException | None] = []

    def decode() -> None:
        try:
            codec.decode(data, "hostile.msgpack")
        except agenttape.CassetteFormatError as exc:
            errors.append(exc)
        else:
            errors.append(None)

    bound = MEMORY_FACTOR * len(data) + MEMORY_SLACK
    peak = least_peak(decode, bound)
    assert peak <= bound, (peak, len(data))
    error = errors[-1]
    if error is not None:
        assert str(error).startswith("hostile.msgpack: "), str(error)
    return error


def load_through_api(data: bytes, path: Path) -> None:
    """The same bytes as a file: load() and use_cassette() agree with the reader, and a
    damaged file is left exactly as it was."""
    path.write_bytes(data)
    try:
        cassette = agenttape.load(path)
    except agenttape.CassetteFormatError as exc:
        assert str(path) in str(exc)
        for mode in ("none", "new_episodes", "all"):
            with pytest.raises(agenttape.CassetteFormatError):
                agenttape.use_cassette(path, mode=mode).__enter__()
        assert path.read_bytes() == data
        return
    for interaction in cassette.interactions:
        assert interaction.started.year >= 1
        for number in (interaction.ttfb, interaction.duration):
            assert number is None or math.isfinite(number)
        if interaction.response is not None:
            assert b"".join(interaction.response.iter_chunks()) == interaction.response.body
            # Offsets are waited for in realtime replay: never endless, never negative.
            assert all(0 <= offset < math.inf for _, offset in interaction.response.chunks)
    cassette.nearest(agenttape.Request("GET", "http://127.0.0.1/"))


@hostile
@given(data=cassettes(), cut=st.integers(min_value=0))
def test_truncated_cassette(data: bytes, cut: int) -> None:
    error = read_bounded(data[: cut % len(data)])
    assert isinstance(error, agenttape.CassetteFormatError)


@hostile
@given(data=cassettes(), flips=st.lists(st.integers(min_value=0), min_size=1, max_size=8))
def test_bit_flipped_cassette(data: bytes, flips: list[int], tmp_path: Path) -> None:
    damaged = bytearray(data)
    for flip in flips:
        damaged[(flip // 8) % len(damaged)] ^= 1 << (flip % 8)
    read_bounded(bytes(damaged))
    load_through_api(bytes(damaged), tmp_path / "flipped.msgpack")


@hostile
@given(data=st.binary(max_size=512))
def test_random_bytes(data: bytes) -> None:
    if data:
        read_bounded(data)
    else:
        assert isinstance(read_bounded(data), agenttape.CassetteFormatError)


LENGTH_HEADERS = {
    "bin32": b"\xc6",
    "str32": b"\xdb",
    "array32": b"\xdd",
    "map32": b"\xdf",
    "ext32": b"\xc9",
    "array16": b"\xdc",
    "map16": b"\xde",
}


@hostile
@given(
    data=cassettes(),
    kind=st.sampled_from(sorted(LENGTH_HEADERS)),
    length=st.integers(0, 2**32 - 1),
    at=st.integers(min_value=0),
    replace=st.booleans(),
)
def test_oversized_length(data: bytes, kind: str, length: int, at: int, replace: bool) -> None:
    width = 2 if kind.endswith("16") else 4
    header = LENGTH_HEADERS[kind] + (length % 2 ** (8 * width)).to_bytes(width, "big")
    if kind == "ext32":
        header += b"\x05"
    at %= len(data)
    hostile_data = data[:at] + header + data[at + (len(header) if replace else 0) :]
    read_bounded(hostile_data)


@hostile
@given(
    depth=st.integers(1, 1100),
    length=st.integers(1, 2**32 - 1),
    container=st.sampled_from([b"\xdd", b"\xdf", b"\x9f", b"\x8f"]),
    padding=st.integers(0, 200_000),
    inside_cassette=st.booleans(),
)
def test_nested_length_bombs(
    depth: int, length: int, container: bytes, padding: int, inside_cassette: bool
) -> None:
    """Lists declaring more items than the file holds, nested: each is sized up front."""
    header = container if container in (b"\x9f", b"\x8f") else container + length.to_bytes(4, "big")
    bomb = header * depth + b"\xc0" * padding
    if inside_cassette:
        bomb = b"\x83\xa9agenttape\x01\xa6header\x80\xacinteractions\x91" + bomb
    error = read_bounded(bomb)
    assert isinstance(error, agenttape.CassetteFormatError)


@pytest.mark.parametrize(
    ("unit", "name"),
    [
        (b"\x90", "empty lists"),
        (b"\x80", "empty maps"),
        (b"\xa2ab", "short strings"),
        (b"\xd4\x05\x00", "extension values"),
        (b"\xc4\x01x", "short binaries"),
    ],
)
def test_many_small_values_stay_within_memory_bound(unit: bytes, name: str) -> None:
    count = 200_000
    data = b"\xdd" + count.to_bytes(4, "big") + unit * count
    assert isinstance(read_bounded(data), agenttape.CassetteFormatError), name


def assert_read_within_bound(path: Path, name: str = "") -> None:
    """``agenttape.load`` of ``path`` stays within the memory bound (see least_peak)."""

    def load() -> None:
        with contextlib.suppress(agenttape.CassetteFormatError):
            agenttape.load(path)

    bound = MEMORY_FACTOR * path.stat().st_size + MEMORY_SLACK
    assert least_peak(load, bound) <= bound, name


@pytest.mark.parametrize(
    ("headers", "chunks", "name"),
    [
        ([["", ""]] * 500, [], "empty header pairs"),
        ([["a", "b"]] * 500, [], "one-letter header pairs"),
        ([[None]] * 500, [], "one-item arrays where pairs belong"),
        ([[]] * 500, [], "empty arrays where pairs belong"),
        ([], [[0, 0.0]] * 500, "empty chunks"),
    ],
)
def test_loading_a_file_of_small_arrays_stays_within_memory_bound(
    headers: list[Any], chunks: list[Any], name: str, tmp_path: Path
) -> None:
    """The reader that streams a file item by item (what load and use_cassette use) keeps
    the same bound, for files it accepts and for files it hands to the whole reading."""
    response = {"status": 200, "body": b"", "headers": headers, "chunks": chunks}
    interaction = {"request": {"method": "GET", "url": "u", "headers": headers, "body": b""}}
    document = {
        "agenttape": 1,
        "header": {},
        "interactions": [{**interaction, "response": response}] * 400,
    }
    data = msgpack.packb(document, use_bin_type=True)
    path = tmp_path / "arrays.msgpack"
    path.write_bytes(data)
    assert_read_within_bound(path, name)


def test_a_file_of_all_different_header_pairs_stays_within_memory_bound(tmp_path: Path) -> None:
    """The reader keeps each header pair once; a file whose pairs never repeat must not make
    that table of pairs cost more than the bound allows."""
    names = (chr(a) + chr(b) for a in range(32, 256) for b in range(32, 256))
    interactions = [
        {
            "request": {
                "method": "GET",
                "url": "u",
                "headers": [[next(names), ""] for _ in range(250)],
                "body": b"",
            },
            "response": {
                "status": 200,
                "body": b"",
                "headers": [[next(names), ""] for _ in range(250)],
            },
        }
        for _ in range(96)
    ]
    data = msgpack.packb(
        {"agenttape": 1, "header": {}, "interactions": interactions}, use_bin_type=True
    )
    path = tmp_path / "pairs.msgpack"
    path.write_bytes(data)
    assert_read_within_bound(path)


@pytest.mark.parametrize(
    ("unit", "name"),
    [([None], "one-item arrays"), ([[None]], "nested one-item arrays"), ({}, "empty maps")],
)
def test_a_key_the_reader_ignores_cannot_hold_what_memory_cannot(
    unit: Any, name: str, tmp_path: Path
) -> None:
    """An interaction may carry keys the reader skips; what they hold is still counted, so a
    file cannot make the streaming reader hold many times its size before it looks."""
    interaction = {
        "request": {"method": "GET", "url": "u", "headers": [], "body": b""},
        "response": {"status": 200, "body": b"", "headers": []},
        # Nested so that no single array is longer than a file of this size may declare.
        "extra": [[[unit] * 50 for _ in range(60)] for _ in range(20)],
    }
    data = msgpack.packb(
        {"agenttape": 1, "header": {}, "interactions": [interaction]}, use_bin_type=True
    )
    path = tmp_path / "extra.msgpack"
    path.write_bytes(data)
    assert_read_within_bound(path, name)


def paths_of(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths_of(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += paths_of(value, (*prefix, index))
    return found


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        return {**document, head: replaced(document[head], rest, value)}
    return [replaced(v, rest, value) if i == head else v for i, v in enumerate(document)]


@hostile
@given(data=cassettes(), choice=st.integers(min_value=0), value=values, drop=st.booleans())
def test_wrong_types_anywhere(
    data: bytes, choice: int, value: Any, drop: bool, tmp_path: Path
) -> None:
    """Any field of a valid cassette replaced by any msgpack value (or removed)."""
    document = document_of(data)
    paths = paths_of(document)
    path = paths[choice % len(paths)]
    parent: Any = document
    for step in path[:-1]:
        parent = parent[step]
    if drop and path and isinstance(parent, dict):
        kept = {k: v for k, v in parent.items() if k != path[-1]}
        document = replaced(document, path[:-1], kept)
    else:
        document = replaced(document, path, value)
    hostile_data = msgpack.packb(document, use_bin_type=True, datetime=True)
    read_bounded(hostile_data)
    load_through_api(hostile_data, tmp_path / "wrong-type.msgpack")


class _Touch:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (Path.touch, (self.marker,))


def test_reader_never_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Touch(marker))
    pickle.loads(payload)
    assert marker.exists()
    marker.unlink()
    path = tmp_path / "pickle.msgpack"
    path.write_bytes(payload)
    with pytest.raises(agenttape.CassetteFormatError):
        agenttape.load(path)
    assert not marker.exists()


@hostile
@given(data=cassettes(), extra=st.lists(values, max_size=3))
def test_item_by_item_reading_gives_the_same_document(data: bytes, extra: list[Any]) -> None:
    """A large list in a small file is read item by item; the result is the same."""
    document = document_of(data)
    document["header"]["extra"] = extra
    data = msgpack.packb(document, use_bin_type=True, datetime=True)
    # Compared re-encoded: a NaN in the tags is not equal to itself.
    assert msgpack.packb(bounded_msgpack.walk(data), use_bin_type=True, datetime=True) == data


def test_many_chunks_in_a_small_file_load(tmp_path: Path) -> None:
    """More list items than a file of this size reads in one go: still a valid cassette."""
    response = agenttape.Response(200, body=b"x" * 5000, chunks=[(1, 0.0)] * 5000)
    interaction = agenttape.Interaction(agenttape.Request("GET", "http://h/"), response)
    data = codec.encode({"agenttape_version": "0"}, [interaction])
    assert len(response.chunks) > len(data) // 1024
    path = tmp_path / "chunks.msgpack"
    path.write_bytes(data)
    (loaded,) = agenttape.load(path).interactions
    assert loaded.response is not None
    assert loaded.response.chunks == response.chunks
    assert list(loaded.response.iter_chunks()) == [b"x"] * 5000


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e9, -1.0])
@pytest.mark.parametrize("field", ["started_at", "ttfb", "duration", "offset"])
def test_times_out_of_range(field: str, number: float, tmp_path: Path) -> None:
    """Times that cannot be waited for or shown are refused when the file is read: realtime
    replay waits for a first byte, a duration and a chunk's offset, so none may be longer
    than a week (1e9 s would keep it waiting for ever, 1e300 s make it fail)."""
    response = agenttape.Response(200, body=b"ab", chunks=[(1, 0.0), (1, 0.5)])
    interaction = agenttape.Interaction(
        agenttape.Request("GET", "http://h/"), response, started_at=1.0, ttfb=0.1, duration=0.2
    )
    document = document_of(codec.encode({"agenttape_version": "0"}, [interaction]))
    raw = document["interactions"][0]
    if field == "offset":
        raw["response"]["chunks"][1][1] = number
    else:
        raw[field] = number
    data = msgpack.packb(document, use_bin_type=True)
    # Before 1970 is still a moment; 1e9 seconds after it too.
    valid = field == "started_at" and number in (-1.0, 1e9)
    assert (read_bounded(data) is None) == valid
    load_through_api(data, tmp_path / "times.msgpack")


@pytest.mark.parametrize("status", [0, -1, 99, 1000, 99999])
def test_statuses_no_status_line_holds_are_refused(status: int, tmp_path: Path) -> None:
    interaction = agenttape.Interaction(
        agenttape.Request("GET", "http://h/"), agenttape.Response(200)
    )
    document = document_of(codec.encode({"agenttape_version": "0"}, [interaction]))
    document["interactions"][0]["response"]["status"] = status
    data = msgpack.packb(document, use_bin_type=True)
    error = read_bounded(data)
    assert isinstance(error, agenttape.CassetteFormatError)
    assert f"interaction 0: response.status is {status}" in str(error)
    load_through_api(data, tmp_path / "status.msgpack")
    result = run_bounded("show", tmp_path / "status.msgpack")
    assert_one_line_error(result, "status.msgpack", "response.status")


def recorded_then_edited(path: Path, edit: Callable[[dict[str, Any]], None]) -> str:
    """A cassette recorded from a real server, then edited by ``edit`` (given the response
    as stored); returns the URL it answers."""
    server = Server(lambda seen: Reply(headers=[("X-Note", "fine")], chunks=[b"ok"]))
    try:
        with agenttape.use_cassette(path, mode="once"):
            httpx.get(server.url)
    finally:
        server.stop()
    document = msgpack.unpackb(path.read_bytes(), timestamp=3)
    edit(document["interactions"][0]["response"])
    path.write_bytes(msgpack.packb(document, use_bin_type=True, datetime=True))
    return server.url


@pytest.mark.parametrize(
    ("place", "text"),
    [("header value", "ok \u2713"), ("header name", "X-\u2713"), ("reason", "OK \u2713")],
)
def test_text_no_header_carries_is_refused_at_load(place: str, text: str, tmp_path: Path) -> None:
    """Headers are bytes, held one character per byte: a character past Latin-1 never came
    from the wire, and every library would fail encoding it back."""

    def edit(response: dict[str, Any]) -> None:
        if place == "reason":
            response["reason"] = text
        elif place == "header name":
            response["headers"][0][0] = text
        else:
            response["headers"][0][1] = text

    path = tmp_path / "latin.msgpack"
    recorded_then_edited(path, edit)
    with pytest.raises(
        agenttape.CassetteFormatError, match=r"interaction 0: .*U\+2713 is outside Latin-1"
    ):
        agenttape.load(path)


def _replay_through(library: str, url: str) -> dict[str, str]:
    if library == "httpx":
        return dict(httpx.get(url).headers)
    if library == "requests":
        return dict(requests.get(url).headers)

    async def get() -> dict[str, str]:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            await response.read()
            return dict(response.headers)

    return asyncio.run(get())


def _email_checks_names() -> bool:
    try:
        email.message.Message()["X\x01Note"] = "1"
    except ValueError:
        return True
    return False


ODD_HEADERS = {
    "a non-ASCII name": ("X-Na\xefve", "1"),
    "a control character in a name": ("X\x01Note", "1"),
    "a space in a name": ("X Note", "1"),
    "a line break in a value": ("X-Note", "a\r\nX-Injected: 1"),
    "a NUL in a value": ("X-Note", "a\x00b"),
}


@pytest.mark.parametrize("odd", sorted(ODD_HEADERS))
@pytest.mark.parametrize("library", ["httpx", "requests", "aiohttp"])
def test_a_header_a_library_cannot_take_is_an_agenttape_error_naming_the_interaction(
    odd: str, library: str, tmp_path: Path
) -> None:
    """A head that loads but that a library's parser refuses (aiohttp reads the head from
    bytes, and rejects what HTTP/1.1 forbids) fails with an error naming the cassette and
    the interaction, never inside the library; a library that takes it gets it as stored."""
    name, value = ODD_HEADERS[odd]

    def edit(response: dict[str, Any]) -> None:
        response["headers"][0] = [name, value]

    path = tmp_path / "odd.msgpack"
    url = recorded_then_edited(path, edit)
    # httpx hands every response's headers to ``email`` (its cookie jar), which refuses a
    # name RFC 5322 does not allow from Python 3.14 on.
    refused_by = {"aiohttp"} | ({"httpx"} if "name" in odd and _email_checks_names() else set())
    with agenttape.use_cassette(path):
        if library in refused_by:
            with pytest.raises(agenttape.CassetteFormatError) as caught:
                _replay_through(library, url)
            message = str(caught.value)
            assert message.startswith(f"{path}: interaction 0 cannot be replayed through {library}")
        else:
            headers = _replay_through(library, url)
            assert {key.lower(): item for key, item in headers.items()}[name.lower()] == value


# -- decompression bombs --------------------------------------------------------------------

BOMB_SIZE = 4 << 30
_STRETCH = 64 << 20


def gzip_bomb(size: int) -> bytes:
    """A gzip stream of ``size`` zero bytes (a multiple of 64 MiB) that any decoder accepts:
    one compressed stretch repeated, a few MiB in all."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = bytes(_STRETCH)
    stretch = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()
    crc = 0
    for _ in range(size // _STRETCH):
        crc = zlib.crc32(zeros, crc)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return head + stretch * (size // _STRETCH) + end + trailer


def record_from(path: Path, encoding: str, body: bytes) -> Path:
    """A cassette recorded from a real server that answers with ``body`` so encoded; the
    client reads it raw, as a client that never decodes it would."""
    server = Server(
        lambda seen: Reply(
            headers=[("Content-Type", "application/json"), ("Content-Encoding", encoding)],
            chunks=[body],
        )
    )
    try:
        with agenttape.use_cassette(path, mode="all"), httpx.stream("GET", server.url) as response:
            for _ in response.iter_raw():
                pass
    finally:
        server.stop()
    return path


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Cassettes whose stored bodies inflate to gigabytes: gzip and deflate bodies of a few
    MiB, a gzip inside a gzip of a few KiB, and a gzip request body."""
    folder = tmp_path_factory.mktemp("bombs")
    gzipped = gzip_bomb(BOMB_SIZE)
    request = agenttape.Request(
        "POST", "http://127.0.0.1/upload", [("Content-Encoding", "gzip")], gzipped
    )
    upload = folder / "upload.msgpack"
    upload.write_bytes(
        codec.encode(
            {"agenttape_version": "0"},
            [agenttape.Interaction(request, agenttape.Response(200, body=b"{}"))],
        )
    )
    return {
        "gzip": record_from(folder / "gzip.msgpack", "gzip", gzipped),
        "deflate": record_from(folder / "deflate.msgpack", "deflate", gzipped[10:-8]),
        "gzip in gzip": record_from(
            folder / "nested.msgpack", "gzip, gzip", gzip.compress(gzipped, 9, mtime=0)
        ),
        "request": upload,
    }


def assert_bounded(result: Bounded, path: Path) -> None:
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr, result.stderr
    # Each body decodes to at most 8 MiB for reading: the process stays near that.
    assert result.peak < 256 << 20, (result.peak, path.stat().st_size)
    assert result.seconds < 60, result.seconds


READING = [
    ("show", "-i", "0"),
    ("show", "-i", "0", "--json"),
    ("export", "--format", "json"),
    ("export", "--format", "har"),
]


@pytest.mark.parametrize("kind", ["gzip", "deflate", "gzip in gzip"])
@pytest.mark.parametrize("command", READING, ids=" ".join)
def test_reading_a_decompression_bomb_is_bounded_and_says_what_was_cut(
    bombs: dict[str, Path], kind: str, command: tuple[str, ...]
) -> None:
    path = bombs[kind]
    result = run_bounded(command[0], path, *command[1:])
    assert_bounded(result, path)
    assert result.returncode == 0, result.stderr
    assert "decoded only the first" in result.stdout


@pytest.mark.parametrize("kind", ["gzip", "gzip in gzip", "request"])
def test_audit_of_a_decompression_bomb_is_bounded_and_not_called_clean(
    bombs: dict[str, Path], kind: str
) -> None:
    path = bombs[kind]
    result = run_bounded("audit", path)
    assert_bounded(result, path)
    assert result.returncode == 1
    assert "too-large-to-scan" in result.stdout
    assert "too large to scan in full" in result.stderr


@pytest.mark.parametrize("kind", ["gzip", "gzip in gzip"])
def test_redact_refuses_a_response_body_bomb_and_leaves_the_file(
    bombs: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "copy.msgpack"
    shutil.copyfile(bombs[kind], path)
    result = run_bounded("redact", path)
    assert_bounded(result, path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "interaction 0" in result.stderr and "nothing was written" in result.stderr
    assert path.read_bytes() == bombs[kind].read_bytes()


def test_redact_of_a_request_body_bomb_stores_it_redacted(
    bombs: dict[str, Path], tmp_path: Path
) -> None:
    """A compressed request body too large to read cannot be proven free of secrets: it is
    stored as ``<redacted>`` whole, as recording stores one."""
    path = tmp_path / "copy.msgpack"
    shutil.copyfile(bombs["request"], path)
    result = run_bounded("redact", path)
    assert_bounded(result, path)
    assert result.returncode == 0, result.stderr
    (interaction,) = agenttape.load(path).interactions
    assert interaction.request.body == b"<redacted>"


def test_diff_of_decompression_bombs_is_bounded(bombs: dict[str, Path]) -> None:
    result = run_bounded("diff", bombs["gzip"], bombs["gzip in gzip"])
    assert_bounded(result, bombs["gzip"])
    assert result.returncode == 1, result.stderr  # one says gzip, the other gzip twice
