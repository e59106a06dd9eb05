"""Which interactions ``live=`` and ``frozen=`` name: boundary names and host patterns.

A pattern is a function boundary (``"tool:lookup_order"``, or the bare ``"lookup_order"``) or a
host glob (``"api.openai.com"``, ``"*.anthropic.com"``, ``"127.0.0.1:8765"`` with a port).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from .models import Request
from .urls import parse_url

TOOL_PREFIX = "tool:"


class Scope:
    """A set of patterns; ``bool(scope)`` is False when there are none."""

    __slots__ = ("patterns",)

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(p.strip().lower() for p in patterns)
        for pattern in self.patterns:
            if not pattern or "/" in pattern:
                raise ValueError(
                    f"live/frozen pattern {pattern!r}: use a boundary name ('tool:lookup_order') "
                    "or a host pattern ('api.openai.com', '*.anthropic.com')"
                )

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def matches(self, boundary: str, request: Request) -> bool:
        if not self.patterns:
            return False
        if boundary != "http":
            name = boundary.lower()
            bare = name[len(TOOL_PREFIX) :] if name.startswith(TOOL_PREFIX) else name
            return any(fnmatchcase(name, p) or fnmatchcase(bare, p) for p in self.patterns)
        url = parse_url(request.url)
        with_port = f"{url.host}:{url.port}"
        return any(
            not p.startswith(TOOL_PREFIX)
            and (fnmatchcase(url.host, p) or fnmatchcase(with_port, p))
            for p in self.patterns
        )
