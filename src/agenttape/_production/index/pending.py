"""Runs in flight: the run files a writer's batch holds before their rows reach the index."""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from ..store import Store, StoredFile
from .rows import stamp

# -- runs in flight ------------------------------------------------------------------------
#
# On an object store, finding the runs a writer's batch still holds by listing the newest
# day's folder costs a request per thousand runs of the day. Instead, before it writes run
# files, a writer names them in a small file under ``_pending/`` (beside the index, not in
# it: a store that refuses the index still takes it), and deletes those files once the batch
# holding their rows is written. A reader lists ``_pending/`` and reads the runs named there
# that the index does not hold yet. A writer that died leaves its files; ``agenttape index
# rebuild`` removes those whose runs it indexed.

PENDING = "_pending"
PENDING_SUFFIX = ".names"


def pending_name(writer: str) -> str:
    """A new file naming runs in flight: the time first (they sort by it), the writer's
    random id so that writers never replace each other's."""
    return f"{PENDING}/{stamp()}-{writer}{PENDING_SUFFIX}"


def encode_pending(files: Sequence[StoredFile]) -> bytes:
    return msgpack.packb([[stored.name, stored.size] for stored in files])


def decode_pending(data: bytes) -> list[StoredFile]:
    """The runs a pending file names; ValueError when it is not one."""
    try:
        entries = msgpack.unpackb(data)
        return [StoredFile(str(name), int(size)) for name, size in entries]
    except Exception as exc:
        raise ValueError(f"not a list of runs in flight: {exc}") from None


def pending_files(store: Store) -> list[StoredFile]:
    return [stored for stored in store.listing(PENDING)[1] if stored.name.endswith(PENDING_SUFFIX)]
