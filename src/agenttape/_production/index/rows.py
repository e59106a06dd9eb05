"""The row format of the run index: one Parquet row per kept run, in day files.

Every reader and writer of the index (the recorder's batch, the listing, compaction, a
rebuild, other Parquet engines) agrees on these columns and file names; they live here alone.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from ..._core.models import Interaction
from ..._core.text import aware
from ..._core.urls import parse_url
from ..store import SUFFIX, StoredFile
from . import tag_filters

if TYPE_CHECKING:
    import pyarrow

INDEX = "_index"
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
INDEX_FILE = re.compile(r"_index/date=(\d{4}-\d{2}-\d{2})/([^/.][^/]*)\.parquet")
EXTRA = "pip install 'agenttape-recorder[index]'"
# Rows per row group: a listing by tag reads whole only the row groups holding its runs.
ROW_GROUP = 4096


@dataclass(slots=True, frozen=True)
class IndexRow:
    """One run as the index holds it; the listing shows exactly these fields, whether it read
    them from the index or from the run's header."""

    day: str
    run_id: str
    created: _dt.datetime | None
    status: str
    reasons: list[str]
    n: int | None
    size: int
    path: str
    hosts: list[str]
    models: list[str]
    tags: dict[str, Any]
    duration: float | None


@dataclass(slots=True, frozen=True)
class IndexFile:
    """One Parquet file of the index: its name in the store, the day it holds, its size
    (0: not known) and version (``StoredFile.version``)."""

    name: str
    day: str
    size: int = field(default=0, compare=False)
    version: str = field(default="", compare=False)
    # When the store wrote it (its listing's time; 0: not known).
    modified: float = field(default=0.0, compare=False)


def tag_text(value: Any) -> str:
    """A tag as the ``tags`` column holds it: the text ``--tag K=V`` matches it with."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def describe(
    header: dict[str, Any],
    name: str,
    size: int,
    interactions: Sequence[Interaction] = (),
) -> IndexRow:
    """A run's row from its cassette header (and its exchanges for hosts and models). Its day
    is its folder's, so the index and the folders agree on which runs ``--since`` skips."""
    raw_summary = header.get("run")
    summary: dict[str, Any] = raw_summary if isinstance(raw_summary, dict) else {}
    created = header.get("created_at")
    created = aware(created) if isinstance(created, _dt.datetime) else None
    tags = header.get("tags")
    reasons = summary.get("reasons")
    count = summary.get("interactions")
    duration = summary.get("duration")
    hosts: set[str] = set()
    models: set[str] = set()
    for interaction in interactions:
        if interaction.boundary != "http":
            continue
        host = parse_url(interaction.request.url).host
        if host:
            hosts.add(host)
        call = interaction.llm
        if call is not None and call.model:
            models.add(call.model)
    return IndexRow(
        day=day_of(name, created),
        run_id=str(header.get("run_id") or name.rsplit("/", 1)[-1][: -len(SUFFIX)]),
        created=created,
        status=str(summary.get("status", "ok")),
        reasons=[r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else [],
        n=count if isinstance(count, int) and not isinstance(count, bool) else None,
        size=size,
        path=name,
        hosts=sorted(hosts),
        models=sorted(models),
        tags=tags if isinstance(tags, dict) else {},
        duration=float(duration)
        if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        else None,
    )


def unreadable(stored: StoredFile, reason: str) -> IndexRow:
    """The row of a file that is not a readable cassette, as the listing shows it."""
    return IndexRow(
        day=day_of(stored.name, None),
        run_id=stored.name.rsplit("/", 1)[-1][: -len(SUFFIX)],
        created=None,
        status="unreadable",
        reasons=[reason],
        n=None,
        size=stored.size,
        path=stored.name,
        hosts=[],
        models=[],
        tags={},
        duration=None,
    )


def day_of(name: str, created: _dt.datetime | None) -> str:
    """The dated folder a run is in; a run at the top level goes by its creation day (UTC);
    empty when neither tells."""
    folder, slash, _file = name.partition("/")
    if slash and DAY.fullmatch(folder):
        return folder
    if created is None:
        return ""
    return created.astimezone(_dt.UTC).strftime("%Y-%m-%d")


@functools.cache
def schema() -> pyarrow.Schema:
    import pyarrow as pa

    text_list = pa.list_(pa.string())
    return pa.schema(
        [
            ("run_id", pa.string()),
            ("created", pa.timestamp("us", tz="UTC")),
            ("status", pa.string()),
            ("reasons", text_list),
            ("n", pa.int64()),
            ("bytes", pa.int64()),
            ("path", pa.string()),
            ("hosts", text_list),
            ("models", text_list),
            ("tags", pa.map_(pa.string(), pa.string())),
            ("duration", pa.float64()),
            # The tags exactly as recorded (msgpack), for a listing that shows their types.
            ("tags_msgpack", pa.binary()),
        ]
    )


def pack_tags(tags: dict[str, Any]) -> bytes:
    return msgpack.packb(tags, use_bin_type=True, datetime=True)


def unpack_tags(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    tags = msgpack.unpackb(data, raw=False, strict_map_key=True, timestamp=3)
    return tags if isinstance(tags, dict) else {}


def encode(rows: Sequence[IndexRow]) -> bytes:
    """One Parquet file of ``rows`` (zstd; the merged file of a day is sorted by time)."""
    import pyarrow as pa

    columns = {
        "run_id": [row.run_id for row in rows],
        "created": [row.created for row in rows],
        "status": [row.status for row in rows],
        "reasons": [row.reasons for row in rows],
        "n": [row.n for row in rows],
        "bytes": [row.size for row in rows],
        "path": [row.path for row in rows],
        "hosts": [row.hosts for row in rows],
        "models": [row.models for row in rows],
        "tags": [[(str(k), tag_text(v)) for k, v in row.tags.items()] for row in rows],
        "duration": [row.duration for row in rows],
        "tags_msgpack": [pack_tags(row.tags) for row in rows],
    }
    return parquet_bytes(pa.table(columns, schema=schema()))


def parquet_bytes(table: pyarrow.Table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        writer.write_table(table, row_group_size=ROW_GROUP)
        writer.add_key_value_metadata({tag_filters.KEY: tag_filters.of(table, ROW_GROUP)})
    data: bytes = sink.getvalue().to_pybytes()
    return data


def stamp(moment: _dt.datetime | None = None) -> str:
    """File names sort by this: UTC, to the microsecond."""
    moment = moment or _dt.datetime.now(_dt.UTC)
    return moment.astimezone(_dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def file_name(day: str, when: str) -> str:
    """A new index file's name; the random part keeps two writers (processes, hosts) that
    write the same day at the same moment from replacing each other's file."""
    return f"{INDEX}/date={day}/{when}-{secrets.token_hex(8)}.parquet"
