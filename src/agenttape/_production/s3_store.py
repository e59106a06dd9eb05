"""An ``s3://`` store through obstore (Rust's ``object_store``), when it is installed and the
store's credentials are spelled out (storage options or ``AWS_*`` variables).

It is the same store as s3fs's, object for object, for a fraction of the CPU: importing s3fs
(aiobotocore, botocore) costs about 0.35 s, and signing each request in Python a few
milliseconds more, which is most of what ``agenttape runs`` spends on a store of millions of
runs. Anything this cannot express (a named profile, instance credentials, an option it does
not know) stays with s3fs, which reads them as botocore does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._core.errors import AgentTapeError
from .store_base import SUFFIX, Store, StoredFile, conditional_writes_allowed

_READERS = 16
"""Requests in flight at once for many reads (s3fs's ``cat_ranges`` sends them all at once)."""
_KNOWN_OPTIONS = frozenset({"key", "secret", "token", "endpoint_url", "anon", "client_kwargs"})
_KNOWN_CLIENT_KWARGS = frozenset({"endpoint_url", "region_name"})


def obstore_config(
    storage_options: Mapping[str, Any] | None, environ: Mapping[str, str]
) -> dict[str, Any] | None:
    """The obstore ``S3Store`` settings for s3fs's storage options, or None where obstore
    would not find the same credentials and endpoint as s3fs (botocore) does."""
    options = dict(storage_options or {})
    if set(options) - _KNOWN_OPTIONS:
        return None
    client = options.get("client_kwargs") or {}
    if not isinstance(client, Mapping) or set(client) - _KNOWN_CLIENT_KWARGS:
        return None
    config: dict[str, Any] = {}
    if options.get("anon"):
        config["skip_signature"] = True
    elif options.get("key") and options.get("secret"):
        config["access_key_id"] = options["key"]
        config["secret_access_key"] = options["secret"]
        if options.get("token"):
            config["session_token"] = options["token"]
    elif (
        environ.get("AWS_ACCESS_KEY_ID")
        and environ.get("AWS_SECRET_ACCESS_KEY")
        and not environ.get("AWS_PROFILE")
    ):
        config["access_key_id"] = environ["AWS_ACCESS_KEY_ID"]
        config["secret_access_key"] = environ["AWS_SECRET_ACCESS_KEY"]
        if environ.get("AWS_SESSION_TOKEN"):
            config["session_token"] = environ["AWS_SESSION_TOKEN"]
    else:
        return None  # a profile, SSO, an instance role: botocore's chain, through s3fs
    endpoint = (
        client.get("endpoint_url")
        or options.get("endpoint_url")
        or environ.get("AWS_ENDPOINT_URL_S3")
        or environ.get("AWS_ENDPOINT_URL")
    )
    region = (
        client.get("region_name") or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    )
    if not region and not endpoint:
        return None  # botocore finds a bucket's region by its redirect; object_store does not
    if endpoint:
        config["endpoint"] = str(endpoint)
    config["region"] = str(region or "us-east-1")
    return config


class S3Store(Store):
    """An S3 bucket (and prefix) through obstore; S3 makes each put whole, as with s3fs."""

    def __init__(self, url: str, config: Mapping[str, Any]) -> None:
        from obstore.store import S3Store as _Bucket

        bucket, _, prefix = url[len("s3://") :].partition("/")
        self.url = url
        self.prefix = prefix.strip("/")
        settings = dict(config)
        client_options: Any = (
            {"allow_http": True} if str(settings.get("endpoint", "")).startswith("http://") else {}
        )
        try:
            self.bucket = _Bucket(
                bucket, prefix=self.prefix or None, client_options=client_options, **settings
            )
        except TypeError:
            raise  # an obstore older than these settings: ``s3_store`` leaves it to s3fs
        except Exception as exc:  # obstore's own error for a bad URL or setting
            raise AgentTapeError(f"store {url!r} cannot be opened: {exc}") from None

    def write(self, name: str, data: bytes) -> None:
        import obstore

        obstore.put(self.bucket, name, data)

    def read(self, name: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.bucket, name).bytes())

    def read_prefix(self, name: str, size: int) -> bytes:
        import obstore

        return bytes(obstore.get_range(self.bucket, name, start=0, end=size))

    def read_many(self, names: Sequence[str], size: int | None = None) -> list[bytes | Exception]:
        if size is None:
            return self._each(self.read, [(name,) for name in names])
        return self._each(self.read_prefix, [(name, size) for name in names])

    def read_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes | Exception]:
        """Each file's ranges in one call (obstore merges neighbours), files side by side."""
        import obstore

        by_file: dict[str, list[int]] = {}
        for position, (name, _start, _end) in enumerate(ranges):
            by_file.setdefault(name, []).append(position)

        def one_file(name: str, positions: list[int]) -> list[bytes]:
            found = obstore.get_ranges(
                self.bucket,
                name,
                starts=[ranges[at][1] for at in positions],
                ends=[ranges[at][2] for at in positions],
            )
            return [bytes(piece) for piece in found]

        results: list[bytes | Exception] = [b""] * len(ranges)
        files = list(by_file.items())
        for (_name, positions), answer in zip(files, self._each(one_file, files), strict=True):
            for at, piece in zip(
                positions,
                answer if isinstance(answer, list) else [answer] * len(positions),
                strict=True,
            ):
                results[at] = piece
        return results

    def _each(self, call: Any, arguments: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``call`` for each set of arguments, several at once; an error is returned in its
        place, as fsspec's ``on_error="return"``."""

        def guarded(args: tuple[Any, ...]) -> Any:
            try:
                return call(*args)
            except Exception as exc:  # handed back to the caller in its place
                return exc

        if len(arguments) <= 1:
            return [guarded(args) for args in arguments]
        with ThreadPoolExecutor(min(_READERS, len(arguments))) as pool:
            return list(pool.map(guarded, arguments))

    def _listed(self, prefix: str | None) -> list[Any]:
        import obstore

        return [entry for batch in obstore.list(self.bucket, prefix=prefix) for entry in batch]

    def files(self) -> list[StoredFile]:
        return [
            StoredFile(entry["path"], int(entry["size"]))
            for entry in self._listed(None)
            if entry["path"].endswith(SUFFIX)
            and entry["path"].count("/") <= 1
            and not entry["path"].rsplit("/", 1)[-1].startswith(".")
        ]

    def find(self, run_id: str) -> str | None:
        import obstore

        file_name = run_id + SUFFIX
        try:
            obstore.head(self.bucket, file_name)
        except FileNotFoundError:
            pass
        else:
            return file_name
        matches = sorted(
            (stored.name for stored in self.files() if stored.name.endswith("/" + file_name)),
            reverse=True,
        )
        return matches[0] if matches else None

    def listing(self, folder: str = "") -> tuple[list[str], list[StoredFile]]:
        import obstore

        found = obstore.list_with_delimiter(self.bucket, folder or None)
        folders = [
            path.rsplit("/", 1)[-1]
            for path in found["common_prefixes"]
            if not path.rsplit("/", 1)[-1].startswith(".")
        ]
        files = [
            _stored(entry)
            for entry in found["objects"]
            if not entry["path"].rsplit("/", 1)[-1].startswith(".")
        ]
        return folders, files

    def walk(self, folder: str) -> list[StoredFile]:
        return [
            _stored(entry)
            for entry in self._listed(folder or None)
            if "/." not in "/" + entry["path"]
        ]

    def delete(self, name: str) -> None:
        import obstore

        obstore.delete(self.bucket, name)  # S3 answers a delete of no object as done

    def delete_many(self, names: Sequence[str]) -> None:
        import obstore

        for start in range(0, len(names), 1000):
            obstore.delete(self.bucket, list(names[start : start + 1000]))

    @property
    def conditional_creates(self) -> bool:
        return conditional_writes_allowed()

    def create(self, name: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.bucket, name, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def location(self, name: str) -> str:
        return f"{self.url.rstrip('/')}/{name}"


def _stored(entry: Mapping[str, Any]) -> StoredFile:
    modified = entry.get("last_modified")
    return StoredFile(
        entry["path"],
        int(entry["size"]),
        version=str(entry.get("e_tag") or (modified.isoformat() if modified else "")),
        modified=modified.timestamp() if modified is not None else 0.0,
    )


def s3_store(url: str, storage_options: Mapping[str, Any] | None) -> S3Store | None:
    """The obstore store for ``url``, or None where s3fs should open it."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        return None
    config = obstore_config(storage_options, os.environ)
    if config is None:
        return None
    try:
        return S3Store(url, config)
    except TypeError:
        return None
