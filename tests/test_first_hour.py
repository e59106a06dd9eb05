"""What a new user meets in the first hour with the recorder: the run id ``show`` prints is one
``fetch`` takes; ``show`` and ``view`` say why a run was kept; ``fetch`` keeps an existing
file; the recorder's printed stats include ``lost``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

import agenttape
from tests.cli_support import assert_one_line_error, cli
from tests.servers import Server, echo_path
from tests.test_view import chromium, embedded, page_of


def kept_run(tmp_path: Path, serve: Callable[..., Server]) -> tuple[Path, agenttape.Recorder, str]:
    server = serve(echo_path)
    store = tmp_path / "runs"
    with agenttape.Recorder(store, keep="errors") as recorder, recorder.run(user_id="u_1") as run:
        httpx.get(f"{server.url}/status/500/orders")
    return store, recorder, run.run_id


def test_the_id_show_prints_is_one_fetch_takes(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    store, _recorder, run_id = kept_run(tmp_path, serve)
    [path] = store.glob("*/*.msgpack")
    shown = cli("show", path)
    assert shown.returncode == 0 and f"run {run_id}," in shown.stdout
    out = tmp_path / "r.msgpack"
    fetched = cli("fetch", store, run_id[:12], out)
    assert fetched.returncode == 0, fetched.stderr
    assert out.read_bytes() == path.read_bytes()
    twin = path.with_name(run_id[:12] + "0" * 20 + ".msgpack")
    twin.write_bytes(path.read_bytes())
    assert_one_line_error(
        cli("fetch", store, run_id[:12], tmp_path / "other.msgpack"),
        f"2 runs in {store} start with {run_id[:12]}",
        "give more of the run id",
    )


def test_fetch_keeps_an_existing_file_unless_forced(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    store, _recorder, run_id = kept_run(tmp_path, serve)
    out = tmp_path / "mine.msgpack"
    out.write_bytes(b"my own cassette")
    assert_one_line_error(cli("fetch", store, run_id, out), f"{out} exists; pass --force")
    assert out.read_bytes() == b"my own cassette"
    assert cli("fetch", store, run_id, out, "--force").returncode == 0
    assert out.read_bytes() == next(store.glob("*/*.msgpack")).read_bytes()


def test_show_and_view_say_why_a_run_was_kept(tmp_path: Path, serve: Callable[..., Server]) -> None:
    store, _recorder, _run_id = kept_run(tmp_path, serve)
    [path] = store.glob("*/*.msgpack")
    headline = "Kept because a call failed: HTTP 500 from GET http://127.0.0.1"
    shown = cli("show", path)
    assert headline in shown.stdout.splitlines()[1]
    page, text = page_of(path, tmp_path)
    data = embedded(text)
    assert data["kept"].startswith("kept because a call failed: HTTP 500 from GET http://127.0.0.1")
    kit = dict((name, value) for name, value in data["kit"])
    assert "run" not in kit and kit["kept"] == data["kept"]
    dom = chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert f'class="alert kept">{headline}' in dom


def test_printed_stats_include_lost(tmp_path: Path, serve: Callable[..., Server]) -> None:
    _store, recorder, _run_id = kept_run(tmp_path, serve)
    assert "lost=0" in repr(recorder.stats)
    assert recorder.stats.lost == 0
