"""A stand-in for a library's object: what it does not define itself is the object's."""

from __future__ import annotations

from typing import Any


class Forwarding:
    """Stands in for ``wrapped`` (a transport, a network stream): an attribute the stand-in
    does not define is read from ``wrapped``, so the library sees the object it made."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)
