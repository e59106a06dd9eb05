"""Which index files a reader reads: each day's files, as its believed manifest makes them up.

A file merged away by a compaction on a store without conditional creates stays listed for a
grace period; the day's manifest (``manifests``) says which files are the day.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..store import Store, StoredFile
from . import manifests
from .rows import INDEX, INDEX_FILE, IndexFile


def index_files(store: Store) -> list[IndexFile]:
    """The index's Parquet files a reader reads (temporary and hidden files left out): where
    a day has manifests, those its believed manifest makes up the day with (``manifests``)."""
    days = believe(store, days_of(store.walk(INDEX)))
    return [found for day in days.values() for found in day.live()]


@dataclass(slots=True)
class DayFiles:
    """A day's index files and manifests as listed, and its believed manifest."""

    files: list[IndexFile] = field(default_factory=list)
    manifest_names: list[str] = field(default_factory=list)
    believed: manifests.Manifest | None = None
    # When the store wrote each manifest (its listing's time).
    manifest_times: dict[str, float] = field(default_factory=dict)

    def live(self) -> list[IndexFile]:
        names = set(manifests.live([found.name for found in self.files], self.believed))
        return [found for found in self.files if found.name in names]


def days_of(listed: Iterable[StoredFile]) -> dict[str, DayFiles]:
    by_day: dict[str, DayFiles] = defaultdict(DayFiles)
    for stored in listed:
        match = INDEX_FILE.fullmatch(stored.name)
        if match:
            by_day[match.group(1)].files.append(
                IndexFile(
                    stored.name,
                    match.group(1),
                    stored.size,
                    version=stored.version,
                    modified=stored.modified,
                )
            )
            continue
        match = manifests.MANIFEST_FILE.fullmatch(stored.name)
        if match:
            by_day[match.group(1)].manifest_names.append(stored.name)
            by_day[match.group(1)].manifest_times[stored.name] = stored.modified
    return dict(by_day)


def believe(store: Store, by_day: dict[str, DayFiles]) -> dict[str, DayFiles]:
    with_manifests = {
        day: found.manifest_names for day, found in by_day.items() if found.manifest_names
    }
    for day, manifest in manifests.believed_many(store, with_manifests).items():
        by_day[day].believed = manifest
    return by_day


def day_files(store: Store, day: str) -> list[IndexFile]:
    """The day's files a reader reads, listed now."""
    return listed_day(store, day).live()


def listed_day(store: Store, day: str) -> DayFiles:
    listed = (
        store.listing(f"{INDEX}/date={day}")[1]
        + store.listing(f"{manifests.MANIFESTS}/date={day}")[1]
    )
    return believe(store, days_of(listed)).get(day, DayFiles())
