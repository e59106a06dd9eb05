"""Tag filters in an index file's footer.

On object storage a listing by tag should fetch only the row groups holding the tag, not the
tag column of every row group (a request each). So each file's footer carries, per row group, a
Bloom filter of its ``key=value`` tag texts: the footer (one request) tells which row groups
may hold the runs, and only those are fetched. Engines other than ours ignore the footer's
key-value metadata."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import msgpack

if TYPE_CHECKING:
    import pyarrow
    import pyarrow.parquet

KEY = b"agenttape.tag_filter"
# Bits per distinct tag and probes per tag: about 0.6 % of row groups without the tag pass.
FILTER_BITS = 12
FILTER_PROBES = 4


def item(key: str, text: str) -> bytes:
    return f"{key}\0{text}".encode()


def _probes(entry: bytes, bits: int) -> list[int]:
    digest = hashlib.blake2b(entry, digest_size=8).digest()
    first = int.from_bytes(digest[:4], "little")
    step = int.from_bytes(digest[4:], "little") | 1
    return [(first + probe * step) % bits for probe in range(FILTER_PROBES)]


def bloom(items: set[bytes]) -> bytes:
    """A Bloom filter of ``items``, ``FILTER_BITS`` bits each (64 at least)."""
    field_ = bytearray(max(8, (len(items) * FILTER_BITS + 7) // 8))
    bits = len(field_) * 8
    for entry in items:
        for bit in _probes(entry, bits):
            field_[bit >> 3] |= 1 << (bit & 7)
    return bytes(field_)


def may_hold(filter_: bytes, entry: bytes) -> bool:
    bits = len(filter_) * 8
    return all(filter_[bit >> 3] & (1 << (bit & 7)) for bit in _probes(entry, bits))


def of(table: pyarrow.Table, rows_per_group: int) -> bytes:
    """The footer entry: one filter per row group of ``table`` written ``rows_per_group``
    rows a group."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tags = table.column("tags").combine_chunks()
    # ``keys`` and ``items`` are the whole children; the offsets index into them.
    offsets = tags.offsets.to_pylist()
    items = pc.binary_join_element_wise(
        tags.keys.cast("binary"), tags.items.cast("binary"), pa.scalar(b"\0", pa.binary())
    ).to_pylist()
    groups = [
        bloom(set(items[offsets[start] : offsets[min(start + rows_per_group, len(tags))]]))
        for start in range(0, len(tags), rows_per_group)
    ]
    return msgpack.packb({"rows": rows_per_group, "probes": FILTER_PROBES, "groups": groups})


def read(metadata: pyarrow.parquet.FileMetaData) -> list[bytes] | None:
    """The filters in a file's footer, one per row group; None when it has none (a file
    written before them, or by another program)."""
    entry = (metadata.metadata or {}).get(KEY)
    if entry is None:
        return None
    try:
        body = msgpack.unpackb(entry, raw=False)
        groups = body["groups"]
        usable = body["probes"] == FILTER_PROBES and len(groups) == metadata.num_row_groups
    except Exception:
        return None
    return [bytes(group) for group in groups] if usable else None
