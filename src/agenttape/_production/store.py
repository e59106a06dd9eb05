"""Where a recorder keeps its runs: a local folder, or any fsspec URL (s3://, gs://, memory://).

A store holds plain cassette files named ``<run_id>.msgpack``, at its top level or one dated
folder down, so a fleet of services can write to shared object storage and anyone can list
and copy runs out with ordinary tools.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._core.errors import AgentTapeError, CassetteNotFoundError
from .._core.files import replacing
from .s3_store import s3_store
from .store_base import (
    CONDITIONAL_WRITES,
    SUFFIX,
    Store,
    StoredFile,
    conditional_writes_allowed,
    modified_of,
)

__all__ = [
    "CONDITIONAL_WRITES",
    "SUFFIX",
    "FsspecStore",
    "LocalStore",
    "Store",
    "StoredFile",
    "conditional_writes_allowed",
    "modified_of",
    "open_store",
]


class LocalStore(Store):
    """A folder; each file appears whole (temporary file, then rename), so a reader never sees
    half a run. There is no fsync: it would cap a busy service at a few hundred runs a second,
    and a power cut then loses the newest runs, which the listing shows as unreadable."""

    lists_cheaply = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.url = str(self.root)
        self._folders: set[str] = set()

    def _places(self, name: str, suffix: str) -> tuple[str, str, str]:
        """The folder, the final path and a temporary path beside it for ``name``: hidden,
        and unique per process and writer thread, so writers never collide."""
        folder, _slash, file_name = name.rpartition("/")
        directory = os.path.join(self.url, folder)
        temporary = f".{file_name}.{os.getpid()}.{threading.get_ident()}.{suffix}"
        return directory, os.path.join(directory, file_name), os.path.join(directory, temporary)

    def _write_new(self, directory: str, temporary: str, data: bytes) -> None:
        descriptor = self._create(directory, temporary)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        finally:
            os.close(descriptor)

    def write(self, name: str, data: bytes) -> None:
        directory, path, temporary = self._places(name, "tmp")
        with replacing(temporary, path):
            self._write_new(directory, temporary, data)

    def _create(self, directory: str, temporary: str) -> int:
        """Open ``temporary`` for writing, making its folder once (again if it was removed)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
        if directory in self._folders:
            try:
                return os.open(temporary, flags, 0o666)
            except FileNotFoundError:
                self._folders.discard(directory)
        os.makedirs(directory, exist_ok=True)
        self._folders.add(directory)
        return os.open(temporary, flags, 0o666)

    @property
    def conditional_creates(self) -> bool:
        return conditional_writes_allowed()

    def create(self, name: str, data: bytes) -> bool:
        # Written whole under a name of its own, then linked: link(2) fails if the name is
        # taken, so exactly one of two creators wins and readers never see half a file.
        directory, path, temporary = self._places(name, "new")
        try:
            self._write_new(directory, temporary, data)
            os.link(temporary, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        return True

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def read_prefix(self, name: str, size: int) -> bytes:
        with open(self.root / name, "rb") as handle:
            return handle.read(size)

    def files(self) -> list[StoredFile]:
        if not self.root.is_dir():
            raise CassetteNotFoundError(f"store {self.url} does not exist or is not a folder")
        found = []
        for pattern in (f"*{SUFFIX}", f"*/*{SUFFIX}"):
            for path in self.root.glob(pattern):
                if path.is_file() and not path.name.startswith("."):
                    found.append(
                        StoredFile(path.relative_to(self.root).as_posix(), path.stat().st_size)
                    )
        return found

    def find(self, run_id: str) -> str | None:
        file_name = run_id + SUFFIX
        if (self.root / file_name).is_file():
            return file_name
        for path in sorted(self.root.glob(f"*/{file_name}"), reverse=True):
            if path.is_file():
                return path.relative_to(self.root).as_posix()
        return None

    def listing(self, folder: str = "") -> tuple[list[str], list[StoredFile]]:
        folders: list[str] = []
        found: list[StoredFile] = []
        prefix = f"{folder}/" if folder else ""
        try:
            entries = list(os.scandir(self.root / folder))
        except (FileNotFoundError, NotADirectoryError):
            return folders, found
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                folders.append(entry.name)
            elif entry.is_file():
                stat = entry.stat()
                found.append(StoredFile(prefix + entry.name, stat.st_size, modified=stat.st_mtime))
        return folders, found

    def walk(self, folder: str) -> list[StoredFile]:
        folders, found = self.listing(folder)
        for name in folders:
            found.extend(self.walk(f"{folder}/{name}" if folder else name))
        return found

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / name)

    def location(self, name: str) -> str:
        return os.path.join(self.url, name)


class FsspecStore(Store):
    """Any fsspec filesystem; object stores make each put whole, so readers never see half."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        try:
            import fsspec
        except ImportError:
            raise AgentTapeError(
                f"store {url!r} is a URL, which needs fsspec: pip install 'agenttape-recorder[store]' "
                "(plus the filesystem's own package, such as s3fs or gcsfs)"
            ) from None
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise AgentTapeError(f"store {url!r} cannot be opened: {exc}") from None
        self.root = root.rstrip("/")
        self.url = url

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _name(self, path: str) -> str:
        return path.strip("/")[len(self.root.strip("/")) :].lstrip("/")

    def write(self, name: str, data: bytes) -> None:
        path = self._path(name)
        try:
            self.fs.pipe_file(path, data)
        except FileNotFoundError:
            # Filesystems with real folders (local, sftp) want the dated folder first.
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(path, data)

    def read(self, name: str) -> bytes:
        data: bytes = self.fs.cat_file(self._path(name))
        return data

    def read_prefix(self, name: str, size: int) -> bytes:
        data: bytes = self.fs.cat_file(self._path(name), start=0, end=size)
        return data

    def read_many(self, names: Sequence[str], size: int | None = None) -> list[bytes | Exception]:
        if not names:
            return []
        paths = [self._path(name) for name in names]
        found: list[bytes | Exception] = self.fs.cat_ranges(
            paths, [0] * len(paths), [size] * len(paths), on_error="return"
        )
        return [
            FileNotFoundError(name) if isinstance(data, KeyError) else data
            for name, data in zip(names, found, strict=True)
        ]

    def read_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes | Exception]:
        if not ranges:
            return []
        found: list[bytes | Exception] = self.fs.cat_ranges(
            [self._path(name) for name, _start, _end in ranges],
            [start for _name, start, _end in ranges],
            [end for _name, _start, end in ranges],
            on_error="return",
        )
        return [
            FileNotFoundError(name) if isinstance(data, KeyError) else data
            for (name, _start, _end), data in zip(ranges, found, strict=True)
        ]

    def files(self) -> list[StoredFile]:
        # Other processes write here too: never answer from a cached listing (of the root or
        # of any folder below it, which a walk down to depth 2 would reuse).
        self.fs.invalidate_cache()
        found = self.fs.find(self.root, maxdepth=2, detail=True)
        return [
            StoredFile(self._name(path), int(info.get("size") or 0))
            for path, info in found.items()
            if path.endswith(SUFFIX) and not path.rsplit("/", 1)[-1].startswith(".")
        ]

    def find(self, run_id: str) -> str | None:
        file_name = run_id + SUFFIX
        self.fs.invalidate_cache(self.root)
        if self.fs.isfile(self._path(file_name)):
            return file_name
        matches = sorted(self.fs.glob(self._path(f"*/{file_name}")), reverse=True)
        return self._name(matches[0]) if matches else None

    def listing(self, folder: str = "") -> tuple[list[str], list[StoredFile]]:
        path = self._path(folder) if folder else self.root
        self.fs.invalidate_cache(path)
        try:
            entries = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        folders: list[str] = []
        found: list[StoredFile] = []
        for info in entries:
            name = self._name(info["name"])
            if not name or name.rsplit("/", 1)[-1].startswith("."):
                continue
            if info.get("type") == "directory":
                folders.append(name.rsplit("/", 1)[-1])
            else:
                found.append(
                    StoredFile(
                        name,
                        int(info.get("size") or 0),
                        version=_version(info),
                        modified=modified_of(info),
                    )
                )
        return folders, found

    def walk(self, folder: str) -> list[StoredFile]:
        path = self._path(folder) if folder else self.root
        self.fs.invalidate_cache(path)
        try:
            found = self.fs.find(path, detail=True)
        except FileNotFoundError:
            return []
        return [
            StoredFile(
                self._name(name),
                int(info.get("size") or 0),
                version=_version(info),
                modified=modified_of(info),
            )
            for name, info in found.items()
            if info.get("type") != "directory" and "/." not in "/" + self._name(name)
        ]

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name))

    def delete_many(self, names: Sequence[str]) -> None:
        for start in range(0, len(names), 1000):
            chunk = [self._path(name) for name in names[start : start + 1000]]
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(chunk)

    @property
    def conditional_creates(self) -> bool:
        return "s3" in self.fs.protocol and conditional_writes_allowed()

    def create(self, name: str, data: bytes) -> bool:
        path = self._path(name)
        if "s3" in self.fs.protocol:
            # S3 (and moto, MinIO, R2) refuse a PUT with If-None-Match: * over an object.
            try:
                self.fs.pipe_file(path, data, mode="create")
            except FileExistsError:
                return False
            return True
        # Elsewhere no create is won by exactly one of two writers (a write-then-read-back is
        # not): callers check ``conditional_creates`` and publish by manifests instead.
        raise AgentTapeError(f"{self.url} has no conditional create: it publishes by manifests")

    def location(self, name: str) -> str:
        location: str = self.fs.unstrip_protocol(self._path(name))
        return location


def _version(info: dict[str, Any]) -> str:
    """What tells a file's version apart in an fsspec listing: S3's ETag, else a time."""
    for key in ("ETag", "etag", "generation", "mtime", "LastModified", "last_modified", "created"):
        if info.get(key):
            return str(info[key])
    return ""


def open_store(
    location: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> Store:
    """A folder path (or ``file://`` URL) is a LocalStore; an ``s3://`` URL goes through
    obstore where it can (``s3_store``), any other URL through fsspec."""
    text = os.fspath(location)
    if text.startswith("file://"):
        return LocalStore(text[len("file://") :])
    if text.startswith("s3://"):
        fast = s3_store(text, storage_options)
        if fast is not None:
            return fast
    if "://" in text:
        return FsspecStore(text, storage_options)
    return LocalStore(text)
