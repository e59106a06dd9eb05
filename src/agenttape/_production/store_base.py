"""What every store is: the few operations the recorder and the run listing need, and what a
listing says about one file. ``store`` opens one from a path or URL."""

from __future__ import annotations

import datetime as _dt
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SUFFIX = ".msgpack"
# Set to "off", a store is used as one without conditional creates: compactions publish
# manifests rather than claim days (``manifests``). For tests, and for a folder on a network
# filesystem whose link(2) cannot be trusted.
CONDITIONAL_WRITES = "AGENTTAPE_CONDITIONAL_WRITES"


def conditional_writes_allowed() -> bool:
    return os.environ.get(CONDITIONAL_WRITES, "").strip().lower() not in ("off", "0", "no")


@dataclass(slots=True, frozen=True)
class StoredFile:
    """One cassette in a store: its name relative to the store, and its size in bytes; from
    an object store's listing, what tells this version of the file from another of the same
    name and size (its ETag, else its time), or empty; and when the store last wrote it
    (seconds since the epoch by the store's clock, 0: not known), which the manifests'
    garbage collection trusts over a writer's clock."""

    name: str
    size: int
    version: str = field(default="", compare=False)
    modified: float = field(default=0.0, compare=False)


def modified_of(info: dict[str, Any]) -> float:
    """When an fsspec listing entry was last written: S3's ``LastModified``, a local file's
    ``mtime``, the memory filesystem's ``created``; 0 when it does not say."""
    found: Any = info.get("LastModified", info.get("mtime", info.get("created")))
    if isinstance(found, _dt.datetime):
        return found.timestamp()
    return float(found) if isinstance(found, (int, float)) else 0.0


class Store(ABC):
    """The few operations the recorder and the run listing need."""

    url: str
    # Listing a folder of thousands of files takes milliseconds (a local disk), not a request
    # per thousand (an object store): the run listing may list the newest days' folders.
    lists_cheaply: bool = False

    @property
    def conditional_creates(self) -> bool:
        """``create`` is atomic here (exactly one of two creators wins): compactions claim
        days. Otherwise they publish manifests."""
        return False

    @abstractmethod
    def write(self, name: str, data: bytes) -> None: ...

    @abstractmethod
    def read(self, name: str) -> bytes: ...

    @abstractmethod
    def read_prefix(self, name: str, size: int) -> bytes: ...

    def read_many(self, names: Sequence[str], size: int | None = None) -> list[bytes | Exception]:
        """Several files (their first ``size`` bytes, or whole); an error in place of a file
        that cannot be read. An object store answers them in parallel."""
        found: list[bytes | Exception] = []
        for name in names:
            try:
                found.append(self.read(name) if size is None else self.read_prefix(name, size))
            except OSError as exc:
                found.append(exc)
        return found

    def read_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes | Exception]:
        """Byte ranges ``(name, start, end)`` of files (end excluded); an error in place of a
        range that cannot be read. An object store answers them in parallel."""
        found: list[bytes | Exception] = []
        for name, start, end in ranges:
            try:
                found.append(self.read_prefix(name, end)[start:end])
            except OSError as exc:
                found.append(exc)
        return found

    @abstractmethod
    def files(self) -> list[StoredFile]:
        """Cassettes at the top level and one folder down."""

    @abstractmethod
    def find(self, run_id: str) -> str | None:
        """The name of the run's cassette, or None."""

    @abstractmethod
    def listing(self, folder: str = "") -> tuple[list[str], list[StoredFile]]:
        """The folders and the files directly in ``folder`` (hidden names left out); a
        missing folder is empty."""

    @abstractmethod
    def walk(self, folder: str) -> list[StoredFile]:
        """Every file below ``folder``, at any depth (hidden names left out)."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove one file; one already gone is not an error."""

    def delete_many(self, names: Sequence[str]) -> None:
        """Remove files (an object store takes a thousand in one request)."""
        for name in names:
            self.delete(name)

    @abstractmethod
    def create(self, name: str, data: bytes) -> bool:
        """Write ``name`` only if no file has that name; False when one has. Two writers that
        create one name at once (two hosts) see exactly one True: the store decides."""

    @abstractmethod
    def location(self, name: str) -> str:
        """The file's full path or URL, as another program (a query engine) opens it."""
