from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._production.store import FsspecStore, LocalStore, Store, open_store
from agenttape._production.stored_runs import fetch_run, list_runs
from tests.cli_support import cli
from tests.servers import Server, json_reply


def test_paths_and_file_urls_are_local_folders_other_urls_go_through_fsspec(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    assert isinstance(open_store(tmp_path), LocalStore)
    local = open_store(f"file://{tmp_path}")
    assert isinstance(local, LocalStore) and local.root == tmp_path
    assert isinstance(open_store("memory://somewhere"), FsspecStore)
    with pytest.raises(agenttape.AgentTapeError, match="cannot be opened"):
        open_store("nosuchprotocol://x")


def test_local_store_lists_top_level_and_dated_runs_and_skips_temporary_files(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    store.write("2026-11-20/r_1.msgpack", b"one")
    store.write("r_2.msgpack", b"two!")
    (tmp_path / "2026-11-20" / ".r_3.msgpack.abc.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("not a run")
    files = sorted((f.name, f.size) for f in store.files())
    assert files == [("2026-11-20/r_1.msgpack", 3), ("r_2.msgpack", 4)]
    assert store.find("r_1") == "2026-11-20/r_1.msgpack" and store.find("r_2") == "r_2.msgpack"
    assert store.find("r_3") is None
    assert store.read_prefix("r_2.msgpack", 2) == b"tw"


def test_local_store_makes_a_dated_folder_again_after_a_cleanup_removed_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write("2026-11-20/r_1.msgpack", b"one")
    shutil.rmtree(tmp_path / "2026-11-20")
    store.write("2026-11-20/r_2.msgpack", b"two")
    assert (tmp_path / "2026-11-20" / "r_2.msgpack").read_bytes() == b"two"
    assert sorted(p.name for p in (tmp_path / "2026-11-20").iterdir()) == ["r_2.msgpack"]


def test_fsspec_store_with_real_folders_creates_the_dated_folder(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    store = open_store(f"local://{tmp_path}/fleet")
    assert isinstance(store, FsspecStore)
    store.write("2026-11-20/r_1.msgpack", b"data")
    assert (tmp_path / "fleet" / "2026-11-20" / "r_1.msgpack").read_bytes() == b"data"
    assert [(f.name, f.size) for f in store.files()] == [("2026-11-20/r_1.msgpack", 4)]
    assert store.find("r_1") == "2026-11-20/r_1.msgpack"
    assert store.read("2026-11-20/r_1.msgpack") == b"data"


def test_runs_go_to_a_real_s3_compatible_server_and_come_back_for_replay(
    s3: dict[str, Any], serve: Callable[..., Server], tmp_path: Path
) -> None:
    api = serve(lambda seen: json_reply({"order": seen.path.rsplit("/", 1)[-1]}))
    url = "s3://agent-runs/prod"
    with agenttape.Recorder(url, keep="errors", storage_options=s3) as recorder:
        for user_id in ("u_1", "u_7710"):
            with recorder.run(user_id=user_id) as run:
                httpx.get(f"{api.url}/orders/{user_id}")
                if user_id == "u_7710":
                    run.flag("wrong order shown")
    assert recorder.stats.written == 1 and recorder.stats.lost == 0
    [found] = list_runs(url, tags={"user_id": "u_7710"}, storage_options=s3)
    assert found.status == "flagged" and found.reasons == ["flagged: wrong order shown"]
    out = fetch_run(url, found.run_id, tmp_path / "r.msgpack", storage_options=s3)
    # The command line finds the same run with the usual AWS environment.
    environment = {
        "AWS_ACCESS_KEY_ID": s3["key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret"],
        "AWS_ENDPOINT_URL": s3["client_kwargs"]["endpoint_url"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    listed = cli("runs", url, "--tag", "user_id=u_7710", env=environment)
    assert listed.returncode == 0, listed.stderr
    assert found.run_id in listed.stdout and "flagged" in listed.stdout
    api.stop()
    with agenttape.use_cassette(out, mode="none"):
        assert httpx.get(f"{api.url}/orders/u_7710").json() == {"order": "u_7710"}


def _walk_from_the_top(store: Store) -> list[tuple[str, int]]:
    store.write("top.txt", b"y")
    store.write("2026-11-20/r_1.msgpack", b"one")
    store.write("_index/date=2026-11-20/f.parquet", b"four")
    return sorted((stored.name, stored.size) for stored in store.walk(""))


WALKED = [("2026-11-20/r_1.msgpack", 3), ("_index/date=2026-11-20/f.parquet", 4), ("top.txt", 1)]


def test_walk_from_the_top_names_files_relative_to_the_store(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    """``walk("")`` is every file of the store under the names ``read`` takes: no leading
    slash, nothing outside the store, on a folder, fsspec's local filesystem and S3."""
    assert _walk_from_the_top(LocalStore(tmp_path / "folder")) == WALKED
    assert _walk_from_the_top(open_store(f"local://{tmp_path}/fs")) == WALKED
    assert _walk_from_the_top(open_store("s3://agent-runs/walked", s3)) == WALKED
    # At a bucket's root too (which other tests share: their files are there as well).
    bucket = open_store("s3://agent-runs", s3)
    at_root = {(stored.name, stored.size) for stored in bucket.walk("")}
    assert {("walked/" + name, size) for name, size in WALKED} <= at_root
    assert not [name for name, _size in at_root if name.startswith("/")]
