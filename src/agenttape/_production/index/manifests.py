"""Manifests: the run index on a store without conditional creates (fsspec's ``memory://``,
plain HTTP, GCS through a plain put, a folder with ``AGENTTAPE_CONDITIONAL_WRITES=off``).

Without a create that exactly one of two writers wins, two hosts cannot claim a day. So
nothing is ever overwritten: writers add index files (fragments) under names of their own;
a compaction writes its merged file under a new name (``….merged.<written>.parquet``) and
then publishes a manifest under a new name too,
``_index/_manifest/date=<day>/<version>-<uuid>.json``, that names the day's merged files and
the files folded into them.

A reader of a day takes its newest manifest (highest version; of two at one version, the
greater uuid: every reader picks the same one) and reads the files it names plus every
fragment it has not folded. A merged file no manifest it believes names is ignored: the
output of a compaction killed before it published, or of one that lost a tie. The loser
folded the same fragments as the winner, or some the winner has not: those are still read
as fragments. A day with no manifest is its fragments.

Garbage (folded files, ignored merged files, superseded manifests) is deleted by a later
compaction once the believed manifest is ``grace()`` seconds old. A compaction that has
taken half that long does not publish: so a manifest tying with the believed one is always
published before anything the believed one folded is deleted.

Ages are judged by the store's clock where its listing says when a file was written (S3's
``LastModified``, a file's mtime), by the publisher's (the time in a manifest, the stamp in a
merged file's name) only where it does not: so a publisher's clock behind never makes its
manifest, or its merged file not published yet, look old to another host's garbage
collection, nor one ahead make garbage wait. The clock of the host collecting garbage is
compared with the store's: it must agree with it to well within half the grace period.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..store import Store

MANIFESTS = "_index/_manifest"
MANIFEST_FILE = re.compile(
    r"_index/_manifest/date=(\d{4}-\d{2}-\d{2})/(\d{12})-([0-9a-f]{32})\.json"
)
MERGED = re.compile(r"\.merged\.(\d{8}T\d{6}\.\d{6}Z)\.parquet$")
GRACE = "AGENTTAPE_MANIFEST_GRACE"
# Seconds a believed manifest stands before what it replaced is deleted.
GRACE_SECONDS = 600.0


def grace() -> float:
    """``$AGENTTAPE_MANIFEST_GRACE`` (seconds), else ten minutes. 0 deletes garbage at once:
    safe only while one compaction runs at a time."""
    try:
        return max(0.0, float(os.environ[GRACE]))
    except (KeyError, ValueError):
        return GRACE_SECONDS


@dataclass(slots=True, frozen=True)
class Manifest:
    """One published manifest of a day: the merged files that make it up, the files folded
    into them, and when it was published (seconds since the epoch, the publisher's clock)."""

    name: str
    day: str
    version: int
    files: tuple[str, ...]
    folded: frozenset[str]
    at: float


def manifest_name(day: str, version: int) -> str:
    return f"{MANIFESTS}/date={day}/{version:012d}-{uuid.uuid4().hex}.json"


def merged_name(fragment_like: str, written: str) -> str:
    """A compaction's output: ``fragment_like`` (an index file name: the stamp of its newest
    row first, so readers order it as before) marked merged, with the time it was written."""
    return fragment_like.removesuffix(".parquet") + f".merged.{written}.parquet"


def is_merged(name: str) -> bool:
    return MERGED.search(name) is not None


def merged_written(name: str) -> str:
    found = MERGED.search(name)
    return found.group(1) if found else ""


def version_of(name: str) -> int:
    found = MANIFEST_FILE.fullmatch(name)
    return int(found.group(2)) if found else -1


def encode(day: str, version: int, files: Sequence[str], folded: Iterable[str]) -> bytes:
    body = {
        "day": day,
        "version": version,
        "files": list(files),
        "folded": sorted(folded),
        "at": time.time(),
    }
    return json.dumps(body, indent=0).encode()


def decode(name: str, data: bytes) -> Manifest:
    """ValueError when ``data`` is not a manifest."""
    found = MANIFEST_FILE.fullmatch(name)
    try:
        body = json.loads(data)
        assert found is not None and body["version"] == int(found.group(2))
        return Manifest(
            name=name,
            day=found.group(1),
            version=int(body["version"]),
            files=tuple(str(item) for item in body["files"]),
            folded=frozenset(str(item) for item in body["folded"]),
            at=float(body["at"]),
        )
    except Exception as exc:
        raise ValueError(f"{name} is not a manifest: {exc}") from None


def believed(store: Store, names: Sequence[str]) -> Manifest | None:
    """The newest readable manifest among ``names`` (one day's): highest version, then
    greatest uuid; the names sort that way."""
    for name in sorted(names, reverse=True):
        try:
            return decode(name, store.read(name))
        except (OSError, ValueError):
            continue
    return None


def believed_many(store: Store, by_day: dict[str, list[str]]) -> dict[str, Manifest]:
    """Each day's believed manifest: the newest names read at once, then (rarely: one gone or
    damaged) the others in turn."""
    days = sorted(by_day)
    newest = [max(by_day[day]) for day in days]
    found: dict[str, Manifest] = {}
    for day, name, data in zip(days, newest, store.read_many(newest), strict=True):
        try:
            if isinstance(data, Exception):
                raise ValueError(str(data))
            found[day] = decode(name, data)
        except ValueError:
            manifest = believed(store, [n for n in by_day[day] if n != name])
            if manifest is not None:
                found[day] = manifest
    return found


def live(present: Iterable[str], manifest: Manifest | None) -> list[str]:
    """The index files of a day a reader reads: the manifest's merged files, and fragments it
    has not folded."""
    names = list(present)
    named = set(manifest.files) if manifest else set()
    folded = manifest.folded if manifest else frozenset()
    return [name for name in names if name in named or (not is_merged(name) and name not in folded)]


def stamp_seconds(stamp: str) -> float:
    """A file name's stamp (``20261127T131327.315608Z``) as seconds since the epoch; 0 when
    it is not one."""
    try:
        moment = _dt.datetime.strptime(stamp, "%Y%m%dT%H%M%S.%fZ")
    except ValueError:
        return 0.0
    return moment.replace(tzinfo=_dt.UTC).timestamp()


def published(manifest: Manifest, modified: float) -> float:
    """When ``manifest`` was published: by the store's clock (``modified``, from the
    listing) where known, else by the publisher's."""
    return modified or manifest.at


def garbage(
    present: Mapping[str, float], manifests: Iterable[str], manifest: Manifest, cutoff: float
) -> list[str]:
    """What may go once ``manifest`` (the believed one) is ``grace()`` old: files it folded,
    merged files it does not name written before ``cutoff`` (a grace ago, seconds since the
    epoch; when the store wrote it, from ``present``: name to that time, or where unknown
    the stamp in its name), and the day's other manifests up to its version."""
    files = [
        name
        for name, modified in present.items()
        if name in manifest.folded
        or (
            is_merged(name)
            and name not in manifest.files
            and (modified or stamp_seconds(merged_written(name))) < cutoff
        )
    ]
    return files + [
        name for name in manifests if name != manifest.name and version_of(name) <= manifest.version
    ]
