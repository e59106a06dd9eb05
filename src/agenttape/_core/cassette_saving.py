"""Where a cassette's recording goes when it stops: its own file (written whole, or merged
with what other processes appended meanwhile), beside it when a re-recording is worse than
the old one, a derived file for a ``live=`` replay, or what a tool composed it with."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from . import blame, files, locking
from .errors import AgentTapeWarning, CassetteNotFoundError
from .matching.replay_queue import ReplayQueue
from .models import Interaction
from .options import CassetteOptions, Mode
from .text import counted
from .wire import codec


class Keeping(Protocol):
    """Where a cassette's recording is saved instead of its own file."""

    def save(self, cassette: Any) -> None: ...


class Saving:
    """The saving half of ``Cassette``: what it holds of the file, and how it writes it."""

    path: Path
    mode: Mode
    options: CassetteOptions
    queue: ReplayQueue
    metadata: dict[str, Any]
    keeping: Keeping | None
    _lock: threading.Lock
    _dirty: bool
    _replaced: list[Interaction] | None
    _derived: list[Interaction] | None
    _derived_dirty: bool
    _stored: Sequence[Interaction]
    _digest: bytes | None
    _saved: int
    _interrupted: dict[str, Any] | None

    def save(self) -> None:
        if self.keeping is not None:
            self.keeping.save(self)
            return
        if self.mode == "new_episodes":
            self._save_merged()
            return
        with self._lock:
            interactions = list(self.queue.interactions)
        replaced, self._replaced = self._replaced, None
        keeping: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if replaced is not None and self.path.exists():
            from .verdict import worse

            failed = worse(replaced, interactions)
            if failed:
                self._keep_old(replaced, interactions, failed)
                self._dirty = False
                return
            keeping = files.keeping_previous(self.path, self.sibling("previous"))
        with keeping:
            files.write_atomic(self.path, codec.encode_pieces(self.metadata, interactions))
        self._dirty = False

    def sibling(self, kind: str) -> Path:
        """``<stem>.<kind>.msgpack`` beside the cassette: ``previous``, ``new``."""
        stem = (
            self.path.name[: -len(".msgpack")] if self.path.suffix == ".msgpack" else self.path.name
        )
        return self.path.with_name(f"{stem}.{kind}.msgpack")

    def _keep_old(self, old: list[Interaction], new: list[Interaction], failed: list[int]) -> None:
        """A re-recording that failed where the old one holds answers (the service was
        down): the old file stays, the new recording goes beside it as
        ``<stem>.new.msgpack``, and a warning says so with the verdict."""
        from . import verdict

        target = self.sibling("new")
        files.write_atomic(target, codec.encode_pieces(self.metadata, new))
        lines = [
            f"  #{v.index} {v.label}: {v.kind}" + "".join(f"\n      {line}" for line in v.lines(3))
            for v in verdict.judge(old, new)
            if v.kind != verdict.IDENTICAL
        ]
        blame.warn(
            f"re-recording {self.path} kept the old cassette: "
            f"{counted(len(failed), 'request')} failed without an answer "
            f"(#{', #'.join(map(str, failed))}) where the old recording holds one, so the "
            f"service was down or unreachable. The new recording is {target}; compare with "
            f"agenttape diff {self.path} {target} --verdict, and record again when the "
            "service is up.\n" + "\n".join(lines),
            AgentTapeWarning,
        )

    def _save_derived(self) -> None:
        """The run as it happened (replayed and live calls, in order) beside the original,
        which is never modified."""
        with self._lock:
            interactions = list(self._derived or [])
        from .meta import new_header

        original_tags = self.metadata.get("tags")
        tags = {**(original_tags if isinstance(original_tags, dict) else {}), **self.options.tags}
        header = new_header(tags)
        header["derived_from"] = {"path": str(self.path), "run_id": self.metadata.get("run_id")}
        files.write_atomic(self.sibling("derived"), codec.encode_pieces(header, interactions))
        self._derived_dirty = False

    def _save_merged(self) -> None:
        """Appends what this run recorded to the file as it is now, under the cassette lock:
        another process that appended since this one read the file loses nothing."""
        with locking.locked(self.path):
            with self._lock:
                interactions = list(self.queue.interactions)
            header, stored = self.metadata, self._stored
            try:
                current = files.read_bytes(self.path)
            except CassetteNotFoundError:
                current = None
            if current is not None and files.digest(current) != self._digest:
                header, stored = codec.decode(current, self.path)
                mark_interrupted(header, self._interrupted)
            merged = [*stored, *interactions[self._saved :]]
            data = codec.encode(header, merged)
            files.write_atomic(self.path, data)
            self._stored, self._digest, self._saved = merged, files.digest(data), len(interactions)
            self._dirty = False


def mark_interrupted(header: dict[str, Any], mark: dict[str, Any] | None) -> None:
    """Writes whether the recording saved with ``header`` was cut short: an appending run
    that reached its end clears the mark of one that did not."""
    if mark is None:
        header.pop("interrupted", None)
    else:
        header["interrupted"] = mark
