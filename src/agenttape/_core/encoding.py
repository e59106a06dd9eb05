"""Content-Encoding undone, and gzip or deflate redone, within bounds.

A stored body is small, but a compressed one may inflate to gigabytes: deflate reaches
1:1000, a gzip inside a gzip the square of that (a decompression bomb). Whatever reads,
scans or rewrites a body decodes it here, piece by piece, and stops at a limit its caller
sets, saying so, instead of holding the whole inflated body in memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .models import Headers, first_header
from .text import byte_size

PIECE = 1 << 16
"""Decoded bytes handed out at a time."""

MAX_LAYERS = 4
"""More encodings than this on one body are never undone: each layer costs a decoder's
state, and no server stacks them so."""

_GZIP = ("gzip", "x-gzip")
_KNOWN = frozenset((*_GZIP, "deflate", "br", "zstd", "identity"))
RECODABLE = frozenset((*_GZIP, "deflate", "identity"))
"""Encodings this module can also apply again after a body was rewritten."""


def encodings_of(headers: Headers) -> list[str]:
    """The Content-Encoding codings in the order they were applied, lowercased."""
    value = first_header(headers, "content-encoding") or ""
    return [part.strip().lower() for part in value.split(",") if part.strip()]


class Decoding:
    """The decoded pieces of one body, at most ``limit`` bytes from all layers together.

    Iterate it once. Afterwards ``cut`` says the limit stopped it before the body ended,
    ``incomplete`` that a stream ended before its own end marker (a body cut short on the
    wire), and ``error`` why a layer could not be undone at all ("" when it could).
    """

    def __init__(self, encodings: Sequence[str], body: bytes, limit: int) -> None:
        self.encodings = [coding for coding in encodings if coding != "identity"]
        self.body = body
        self.limit = limit
        self.produced = 0
        self.cut = False
        self.incomplete: list[str] = []
        self.error = _unsupported(self.encodings)

    def __iter__(self) -> Iterator[bytes]:
        if self.error:
            return
        if not self.encodings:  # identity: nothing to undo, nothing inflates
            if self.body:
                yield self.body
            return
        # Fed in slices: a decoder hands back what it did not take, a copy per call.
        body = self.body
        source: Iterator[bytes] = (body[at : at + PIECE] for at in range(0, len(body), PIECE))
        for coding in reversed(self.encodings):
            source = self._counted(self._layer(coding, source))
        yield from source

    def _counted(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """Every layer's output counts against the limit: an inner layer may turn little
        input into much, and an outer one much input into nothing (empty deflate blocks)."""
        for piece in pieces:
            room = self.limit - self.produced
            if len(piece) > room:
                self.cut = True
                if room > 0:
                    self.produced += room
                    yield piece[:room]
                return
            self.produced += len(piece)
            yield piece
            if self.cut:
                return

    def _layer(self, coding: str, source: Iterator[bytes]) -> Iterator[bytes]:
        if coding in _GZIP:
            return self._zlib(coding, source, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            return self._deflate(source)
        if coding == "br":
            return self._brotli(source)
        return self._zstd(source)

    def _deflate(self, source: Iterator[bytes]) -> Iterator[bytes]:
        """Deflate is sent with its zlib wrapper or, by some servers, without: the first two
        bytes tell which."""
        first = next(source, b"")
        wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
        rest = _chain(first, source)
        return self._zlib("deflate", rest, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def _zlib(self, coding: str, source: Iterator[bytes], wbits: int) -> Iterator[bytes]:
        decompressor = zlib.decompressobj(wbits)
        try:
            for data in source:
                while data and not decompressor.eof:
                    out = decompressor.decompress(data, PIECE)
                    data = decompressor.unconsumed_tail
                    if out:
                        yield out
                    if self.cut:
                        return
                if decompressor.eof:
                    return
            # Input used up: what the decoder still holds comes out in pieces too.
            while not decompressor.eof:
                out = decompressor.decompress(b"", PIECE)
                if not out:
                    break
                yield out
                if self.cut:
                    return
        except zlib.error as exc:
            self.error = f"{coding} stream is corrupt ({exc})"
            return
        if not decompressor.eof and not self.cut:
            self.incomplete.append(coding)

    def _brotli(self, source: Iterator[bytes]) -> Iterator[bytes]:
        import brotli  # type: ignore[import-not-found,unused-ignore]

        decompressor: Any = brotli.Decompressor()
        try:
            for data in source:
                out = decompressor.process(data, output_buffer_limit=PIECE)
                while out:
                    yield out
                    if self.cut:
                        return
                    out = decompressor.process(b"", output_buffer_limit=PIECE)
            if not decompressor.is_finished():
                self.incomplete.append("br")
        except brotli.error as exc:
            self.error = f"br stream is corrupt ({exc})"

    def _zstd(self, source: Iterator[bytes]) -> Iterator[bytes]:
        import io

        import zstandard  # type: ignore[import-not-found,unused-ignore]

        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(b"".join(source)))
        try:
            while out := reader.read(PIECE):
                yield out
                if self.cut:
                    return
        except zstandard.ZstdError as exc:
            self.error = f"zstd stream is corrupt ({exc})"


def gathered(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """``pieces`` joined into runs of at least ``size`` bytes (the last may be shorter): a
    scan over large runs pays its fixed costs, and re-reads its overlap, less often."""
    run: list[bytes] = []
    length = 0
    for piece in pieces:
        run.append(piece)
        length += len(piece)
        if length >= size:
            yield b"".join(run)
            run, length = [], 0
    if run:
        yield b"".join(run)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _unsupported(encodings: Sequence[str]) -> str:
    """Why these encodings cannot be undone here; "" when they can."""
    if len(encodings) > MAX_LAYERS:
        return f"{len(encodings)} content-encodings, more than the {MAX_LAYERS} undone"
    for coding in encodings:
        if coding not in _KNOWN:
            return f"unknown content-encoding {coding!r}"
        if coding == "br" and not _brotli_bounded():
            return "br-encoded; install 'brotli>=1.2' to read it"
        if coding == "zstd" and not _importable("zstandard"):
            return "zstd-encoded; install 'zstandard' to read it"
    return ""


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _brotli_bounded() -> bool:
    """brotli decodes within a bound from 1.2 on (``process(..., output_buffer_limit=)``)."""
    try:
        import brotli
    except ImportError:
        return False
    return hasattr(brotli.Decompressor, "can_accept_more_data")


def note(decoding: Decoding, shown: int) -> str:
    """What a finished ``Decoding`` left out, in words, ``shown`` being the bytes decoded;
    "" when nothing."""
    if decoding.cut:
        return (
            f"decoded only the first {byte_size(shown)}: the body inflates to more than "
            f"{byte_size(decoding.limit)} (from {byte_size(len(decoding.body))} stored); "
            "the rest is not decoded"
        )
    return "; ".join(
        f"{coding} stream is incomplete; showing what decodes" for coding in decoding.incomplete
    )


class Encoder:
    """Applies gzip and deflate again, piece by piece, in the order ``encodings`` lists them
    (identity is nothing), so a rewritten body is never held whole. Deterministic: the same
    text always gives the same bytes (no timestamp in the gzip header)."""

    def __init__(self, encodings: Sequence[str]) -> None:
        self._layers: list[Any] = []
        for coding in encodings:
            if coding in _GZIP:
                self._layers.append(zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS))
            elif coding == "deflate":
                self._layers.append(zlib.compressobj())
            elif coding != "identity":
                raise ValueError(f"cannot apply content-encoding {coding!r}")

    def feed(self, data: bytes) -> bytes:
        for layer in self._layers:
            data = layer.compress(data)
        return data

    def finish(self, data: bytes = b"") -> bytes:
        for layer in self._layers:
            data = layer.compress(data) + layer.flush()
        return data


def encode(encodings: Sequence[str], data: bytes) -> bytes:
    """``data`` with ``encodings`` applied again (see ``Encoder``)."""
    return Encoder(encodings).finish(data)


def recodable(encodings: Iterable[str]) -> bool:
    """True when a rewritten body can be encoded again as these encodings say."""
    codings = list(encodings)
    return len(codings) <= MAX_LAYERS and all(coding in RECODABLE for coding in codings)
