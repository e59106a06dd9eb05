"""``s3://`` stores through obstore: opened only where obstore finds the same credentials as
s3fs would, and answering every store operation as the s3fs store does, on moto's server."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agenttape._production.s3_store import S3Store, obstore_config
from agenttape._production.store import FsspecStore, Store, open_store

pytest.importorskip("obstore")

KEYS = {"key": "k", "secret": "s"}


@pytest.mark.parametrize(
    ("options", "environ", "expected"),
    [
        (
            {**KEYS, "client_kwargs": {"endpoint_url": "http://h:9", "region_name": "eu-west-1"}},
            {},
            {
                "access_key_id": "k",
                "secret_access_key": "s",
                "endpoint": "http://h:9",
                "region": "eu-west-1",
            },
        ),
        (
            {**KEYS, "token": "t", "endpoint_url": "http://h:9"},
            {},
            {
                "access_key_id": "k",
                "secret_access_key": "s",
                "session_token": "t",
                "endpoint": "http://h:9",
                "region": "us-east-1",
            },
        ),
        (
            None,
            {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "ap-south-1"},
            {"access_key_id": "k", "secret_access_key": "s", "region": "ap-south-1"},
        ),
        (
            {"anon": True},
            {"AWS_ENDPOINT_URL_S3": "http://s3:1", "AWS_ENDPOINT_URL": "http://all:2"},
            {"skip_signature": True, "endpoint": "http://s3:1", "region": "us-east-1"},
        ),
    ],
)
def test_credentials_spelled_out_open_through_obstore(
    options: dict[str, Any] | None, environ: dict[str, str], expected: dict[str, Any]
) -> None:
    assert obstore_config(options, environ) == expected


@pytest.mark.parametrize(
    ("options", "environ"),
    [
        # botocore's chain finds these; object_store does not read them the same way
        ({"profile": "work"}, {}),
        (None, {"AWS_PROFILE": "work", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}),
        (None, {"AWS_REGION": "eu-west-1"}),  # an instance role
        # an option obstore has no word for
        ({**KEYS, "skip_instance_cache": True, "endpoint_url": "http://h:9"}, {}),
        ({**KEYS, "client_kwargs": {"endpoint_url": "http://h:9", "verify": False}}, {}),
        # no region and no endpoint: botocore follows the bucket's redirect, obstore does not
        (KEYS, {}),
    ],
)
def test_anything_else_stays_with_s3fs(
    options: dict[str, Any] | None, environ: dict[str, str]
) -> None:
    assert obstore_config(options, environ) is None


def test_open_store_chooses_by_the_options(s3: dict[str, Any]) -> None:
    assert isinstance(open_store("s3://agent-runs/p", s3), S3Store)
    assert isinstance(
        open_store("s3://agent-runs/p", {**s3, "skip_instance_cache": True}), FsspecStore
    )


@pytest.fixture
def threads_switch_often() -> Iterator[None]:
    """Threads (ours and the server's) handed the interpreter every microsecond: a create
    that checks and then writes in two steps lets another through between them."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("threads_switch_often")
def test_of_many_creates_of_one_name_at_once_exactly_one_wins(s3: dict[str, Any]) -> None:
    """Two compactions claiming one day at the same moment: one claims it, the other finds
    it busy (else both merge the day, and every row is in the index twice)."""
    contenders = 6
    for store in _both(s3, "claims"):
        winners = []
        for round_number in range(40):
            name = f"_claims/{type(store).__name__}-{round_number}.claim"
            start = threading.Barrier(contenders)
            won: list[bool] = []

            def claim(
                store: Store = store, name: str = name, start: Any = start, won: list[bool] = won
            ) -> None:
                start.wait()
                won.append(store.create(name, b"claim"))

            threads = [threading.Thread(target=claim) for _ in range(contenders)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            winners.append(won.count(True))
        assert winners == [1] * 40, type(store).__name__


def _both(s3: dict[str, Any], prefix: str) -> list[Store]:
    return [
        S3Store(f"s3://agent-runs/{prefix}", obstore_config(s3, {}) or {}),
        FsspecStore(f"s3://agent-runs/{prefix}", s3),
    ]


def _answers(store: Store) -> list[Any]:
    store.write("top.msgpack", b"0123456789")
    store.write("2026-11-27/run-a.msgpack", b"abcdef")
    store.write("2026-11-27/.hidden.msgpack", b"h")
    store.write("2026-11-27/sub/deep.msgpack", b"deep")
    store.write("_index/date=2026-11-27/deep/x.parquet", b"PAR1....PAR1")
    created = [store.create("_claims/day.claim", b"1"), store.create("_claims/day.claim", b"2")]
    folders, files = store.listing("")
    day_folders, day_files = store.listing("2026-11-27")
    answers = [
        created,
        store.read("_claims/day.claim"),
        store.read("top.msgpack"),
        store.read_prefix("top.msgpack", 4),
        store.read_prefix("top.msgpack", 100),
        [
            found if isinstance(found, bytes) else type(found)
            for found in store.read_many(["top.msgpack", "gone.msgpack"], 3)
        ],
        [
            found if isinstance(found, bytes) else type(found)
            for found in store.read_ranges(
                [
                    ("top.msgpack", 2, 4),
                    ("gone.msgpack", 0, 2),
                    ("2026-11-27/run-a.msgpack", 1, 3),
                    ("top.msgpack", 8, 10),
                ]
            )
        ],
        sorted((f.name, f.size) for f in store.files()),
        store.find("run-a"),
        store.find("top"),
        store.find("nobody"),
        sorted(folders),
        sorted((f.name, f.size) for f in files),
        (day_folders, sorted((f.name, f.size) for f in day_files)),
        sorted((f.name, f.size) for f in store.walk("_index")),
        store.listing("missing"),
        store.walk("missing"),
    ]
    versions = [f for f in store.walk("") if f.name == "top.msgpack"]
    answers.append(bool(versions[0].version) and versions[0].modified > 0)
    store.delete("gone.msgpack")
    store.delete_many(["top.msgpack", "2026-11-27/run-a.msgpack"])
    answers.append(sorted(f.name for f in store.walk("")))
    with pytest.raises(FileNotFoundError):
        store.read("top.msgpack")
    return answers


def test_every_operation_answers_as_the_s3fs_store_does(s3: dict[str, Any]) -> None:
    fast, s3fs = _both(s3, "fast"), _both(s3, "slow")
    through_obstore, through_s3fs = _answers(fast[0]), _answers(s3fs[1])
    assert through_obstore == through_s3fs
    assert through_obstore[0] == [True, False]
    assert through_obstore[6] == [b"23", FileNotFoundError, b"bc", b"89"]
    assert through_obstore[8] == "2026-11-27/run-a.msgpack"
    # each sees what the other wrote, file for file
    fast[0].write("2026-11-28/shared.msgpack", b"both")
    assert fast[1].read("2026-11-28/shared.msgpack") == b"both"
    assert [(f.name, f.version) for f in fast[0].walk("2026-11-28")] == [
        (f.name, f.version) for f in fast[1].walk("2026-11-28")
    ]
    assert fast[0].location("a/b.msgpack") == "s3://agent-runs/fast/a/b.msgpack"
