"""Claims: one host at a time rewrites a day of the run index, with no lock service.

Two compactions (or a compaction and a deletion) rewriting the same day at once would each
write a merged file holding the day's rows: every row twice. So whoever rewrites a day first
creates ``_claims/index-<day>.claim`` with the store's conditional write (S3's
``If-None-Match: *``; a local folder's link(2)), of which exactly one creator succeeds.

The claim records, before anything is written, which files the rewrite reads and which file
it writes. A rewrite killed mid-way leaves its claim; the next one finds it stale (its
process is gone from this host, or it is older than ``CLAIM_SECONDS``) and finishes it: the
new file written means the files it replaces are deleted; not written means nothing changed.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ..store import CONDITIONAL_WRITES, FsspecStore, Store, conditional_writes_allowed

CLAIMS = "_claims"
# A claim this old is stale whoever holds it: a day's rewrite takes seconds, not minutes.
CLAIM_SECONDS = 600.0


@dataclass(slots=True)
class Claim:
    """A claim this process holds on one day."""

    name: str
    body: dict[str, Any] = field(default_factory=dict)


def claim_name(day: str) -> str:
    return f"{CLAIMS}/index-{day}.claim"


def acquire(store: Store, day: str) -> Claim | None:
    """Claim ``day``; None when another live rewrite holds it. A stale claim is finished and
    taken over."""
    name = claim_name(day)
    body = {
        "token": secrets.token_hex(16),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "at": time.time(),
    }
    data = msgpack.packb(body)
    for _attempt in range(3):
        if store.create(name, data):
            return Claim(name, body)
        held = read_claim(store, name)
        if held is None:
            continue  # released meanwhile
        if not stale(held):
            return None
        finish(store, held)
        again = read_claim(store, name)
        if again is not None and again.get("token") == held.get("token"):
            store.delete(name)
    return None


def read_claim(store: Store, name: str) -> dict[str, Any] | None:
    try:
        body = msgpack.unpackb(store.read(name), raw=False)
    except FileNotFoundError:
        return None
    except Exception:
        return {}  # damaged: treated as stale
    return body if isinstance(body, dict) else {}


def stale(held: dict[str, Any]) -> bool:
    """The claim's process is gone (on this host), or the claim is too old."""
    at = held.get("at")
    if not isinstance(at, (int, float)) or time.time() - at > CLAIM_SECONDS:
        return True
    if held.get("host") == socket.gethostname():
        pid = held.get("pid")
        if not isinstance(pid, int):
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def record(store: Store, claim: Claim, inputs: Sequence[str], output: str | None) -> None:
    """Say, before writing anything, what the rewrite reads and writes."""
    claim.body = {**claim.body, "inputs": list(inputs), "output": output}
    store.write(claim.name, msgpack.packb(claim.body))


def finish(store: Store, held: dict[str, Any]) -> None:
    """Finish a dead rewrite: its new file is there, so the files it replaced go."""
    inputs = held.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        return
    output = held.get("output")
    if isinstance(output, str):
        try:
            store.read_prefix(output, 4)
        except FileNotFoundError:
            return
    store.delete_many([str(name) for name in inputs])


def release(store: Store, claim: Claim) -> None:
    store.delete(claim.name)


@contextmanager
def held(store: Store, day: str) -> Iterator[Claim | None]:
    """``day`` claimed for the block, released when it ends however it ends; None when
    another live rewrite holds it (the block then leaves the day alone)."""
    claim = acquire(store, day)
    try:
        yield claim
    finally:
        if claim is not None:
            release(store, claim)


@dataclass(slots=True, frozen=True)
class WritePath:
    """How two hosts rewriting the index of a store are kept apart: by claims made with
    conditional creates (``conditional``), else by manifests; and why that way."""

    conditional: bool
    why: str


def write_path(store: Store) -> WritePath:
    """Which path the store's compactions, deletions and rebuilds take. Where the store is
    taken to have conditional creates, it is probed: one name created twice, the second
    refused (a store that ignores ``If-None-Match`` would let two hosts claim one day)."""
    if not conditional_writes_allowed():
        return WritePath(False, f"set by the environment: {CONDITIONAL_WRITES}=off")
    if not store.conditional_creates:
        kind = "this store"
        if isinstance(store, FsspecStore):
            protocol = store.fs.protocol
            kind = "fsspec's " + "/".join(protocol if isinstance(protocol, tuple) else [protocol])
        return WritePath(False, f"{kind} has no create that exactly one of two writers wins")
    name = f"{CLAIMS}/probe-{secrets.token_hex(8)}.claim"
    try:
        first = store.create(name, b"first")
        second = store.create(name, b"second")
    finally:
        store.delete(name)
    if first and not second:
        return WritePath(True, "probed: a second create of one name was refused")
    return WritePath(
        True,
        "but probed: the store let a second create of one name replace the first (it ignores "
        f"If-None-Match): claims are not safe here; set {CONDITIONAL_WRITES}=off on every "
        "host that writes to it",
    )
