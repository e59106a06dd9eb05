"""Replacing what patterns match in a compressed body, piece by piece: the body is decoded,
rewritten and encoded again as a stream, so memory stays near one piece whatever it
inflates to, and the time it may take is bounded by the caller's limit."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .encoding import Decoding, Encoder, gathered, recodable

RUN = 1 << 20
"""Decoded bytes rewritten at a time."""
OVERLAP = 1 << 16
"""Bytes held back from each piece until the next one comes, so a match that spans two
pieces is replaced whole (no credential is this long)."""
_CONTEXT = 64  # bytes kept before the undecided ones, for the patterns' look-behind

Replacement = bytes | Callable[[re.Match[bytes]], bytes]


@dataclass(slots=True, frozen=True)
class Rule:
    """One pattern and what replaces its matches; ``probe`` (optional) is a cheap look that
    says whether a stretch of text may hold a match at all."""

    pattern: re.Pattern[bytes]
    replacement: Replacement
    probe: Callable[[bytes], bool] | None = None


class _Stream:
    """One rule over a stream. ``feed`` returns the text decided so far; a match that
    reaches the end of what came may still grow, so it waits for the next piece."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.changed = False
        self._carry = b""
        self._fresh = 0  # where in ``_carry`` the undecided text starts

    def feed(self, data: bytes, final: bool = False) -> bytes:
        rule = self.rule
        buffer = self._carry + data
        end = len(buffer)
        decided = end if final else max(end - OVERLAP, self._fresh)
        out: list[bytes] = []
        last = self._fresh
        if rule.probe is None or rule.probe(buffer):
            for match in rule.pattern.finditer(buffer, self._fresh):
                start, stop = match.span()
                if start >= decided:
                    break
                if not final and stop == end and stop - start < OVERLAP:
                    decided = max(start, self._fresh)
                    break
                if start == stop:
                    continue
                out.append(buffer[last:start])
                replacement = rule.replacement
                new = replacement if isinstance(replacement, bytes) else replacement(match)
                out.append(new)
                self.changed = self.changed or new != match.group()
                last = stop
        cut = max(decided, last)
        out.append(buffer[last:cut])
        keep = max(cut - _CONTEXT, 0)
        self._carry, self._fresh = buffer[keep:], cut - keep
        return b"".join(out)


class TooLarge(Exception):
    """The body inflates to more than the limit: it was not rewritten."""


def rewrite_encoded(
    body: bytes, encodings: Sequence[str], rules: Sequence[Rule], limit: int
) -> bytes:
    """``body``, stored with ``encodings``, with every rule applied to its decoded text and
    encoded again; ``body`` itself when no rule changed anything, or when it cannot be
    decoded (an unknown encoding, a corrupt or cut-short stream: nothing can be put back).
    Raises TooLarge when it decodes to more than ``limit`` bytes.

    A first pass only looks, so the common body without secrets is never encoded again."""
    if not recodable(encodings) or not _rewrite(body, encodings, rules, limit, None):
        return body
    pieces: list[bytes] = []
    _rewrite(body, encodings, rules, limit, pieces)
    return b"".join(pieces)


def _rewrite(
    body: bytes,
    encodings: Sequence[str],
    rules: Sequence[Rule],
    limit: int,
    out: list[bytes] | None,
) -> bool:
    """True when a rule changed the decoded text; with ``out``, the encoded result goes
    there piece by piece."""
    decoding = Decoding(encodings, body, limit)
    streams = [_Stream(rule) for rule in rules]
    encoder = Encoder(encodings) if out is not None else None
    for piece in gathered(decoding, RUN):
        for stream in streams:
            piece = stream.feed(piece)
        if encoder is not None and out is not None:
            out.append(encoder.feed(piece))
    if decoding.cut:
        raise TooLarge(f"inflates to more than {limit >> 20} MiB")
    if decoding.error or decoding.incomplete:
        return False
    tail = b""
    for stream in streams:
        tail = stream.feed(tail, final=True)
    if encoder is not None and out is not None:
        out.append(encoder.finish(tail))
    return any(stream.changed for stream in streams)
