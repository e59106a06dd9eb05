"""Cold cases and where failing runs cluster: ``run.flag(..., cold=True)``, ``agenttape runs
mark --cold``, ``agenttape runs --errors --by …`` and its ``--html`` chart in a browser."""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path

import pytest

import agenttape
from agenttape._production.index import listing as index_listing
from agenttape._production.index.rebuild import rebuild_index
from agenttape._production.store import open_store
from agenttape._production.stored_runs import list_runs
from tests.cli_support import assert_one_line_error, cli, write_run
from tests.test_erasure import index_rows
from tests.test_view import chromium

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

HOUR = _dt.datetime.now(_dt.UTC).replace(minute=0, second=0, microsecond=0)


def test_a_run_flagged_cold_is_listed_as_a_cold_case(tmp_path: Path) -> None:
    with agenttape.Recorder(tmp_path, keep="errors") as recorder:
        with recorder.run(tenant_id="t_1") as run:
            run.flag("sampled out: bodies not captured", cold=True)
        with recorder.run(tenant_id="t_1") as plain_flag:
            plain_flag.flag("wrong order")
    runs = {info.run_id: info for info in list_runs(tmp_path)}
    assert runs[run.run_id].is_cold and not runs[plain_flag.run_id].is_cold
    assert runs[run.run_id].reasons == ["cold: sampled out: bodies not captured"]
    assert runs[run.run_id].status == "flagged"


def test_runs_mark_cold_rewrites_the_run_and_its_index_row(tmp_path: Path) -> None:
    write_run(tmp_path, "r_1", HOUR, {"tenant_id": "t_1"})
    write_run(tmp_path, "r_2", HOUR, {"tenant_id": "t_1"})
    rebuild_index(tmp_path)
    done = cli("runs", "mark", tmp_path, "r_1", "--cold", "happened once: no capture of the tool")
    assert done.returncode == 0, done.stderr
    assert "marked run r_1 a cold case" in done.stdout
    [info] = [info for info in list_runs(tmp_path) if info.run_id == "r_1"]
    assert info.is_cold and info.status == "flagged"
    assert info.reasons[0] == "cold: happened once: no capture of the tool"
    # The header says so too: a rebuild from the run files gives the same row.
    assert cli("index", "rebuild", tmp_path).returncode == 0
    assert [i for i in list_runs(tmp_path) if i.run_id == "r_1"] == [info]
    assert cli("index", "compact", tmp_path).returncode == 0
    assert index_rows(open_store(tmp_path)) == ["r_1", "r_2"]
    assert_one_line_error(cli("runs", "mark", tmp_path, "r_9", "--cold", "x"), "run r_9 is not")


def seed_cluster(store: Path) -> None:
    """240 runs over 12 hours and 4 tenants, a few failing everywhere, and tenant t_3 failing
    five times in one hour: the group that must come first."""
    number = 0
    for hour in range(12):
        for slot in range(20):
            tenant = f"t_{slot % 4}"
            failing = (tenant == "t_3" and hour == 5 and slot < 20) or slot == hour
            status = "failed" if failing else "ok"
            created = HOUR - _dt.timedelta(hours=hour) + _dt.timedelta(seconds=slot)
            write_run(store, f"r{number}", created, {"tenant_id": tenant}, status=status)
            number += 1
    rebuild_index(store)


def test_errors_by_groups_ranks_the_cluster_first(tmp_path: Path) -> None:
    seed_cluster(tmp_path)
    assert cli("runs", "mark", tmp_path, "r103", "--cold", "no replay").returncode == 0
    shown = cli("runs", tmp_path, "--errors", "--by", "model,hour,tag:tenant_id", "--json")
    assert shown.returncode == 0, shown.stderr
    ranking = json.loads(shown.stdout)
    assert ranking["base"]["runs"] == 240
    failing = sum(1 for info in list_runs(tmp_path, errors=True))
    assert ranking["base"]["counted"] == failing
    first = ranking["groups"][0]
    cluster_hour = (HOUR - _dt.timedelta(hours=5)).strftime("%Y-%m-%d %H:00")
    assert first["group"] == {"model": "gpt-4o-mini", "hour": cluster_hour, "tag:tenant_id": "t_3"}
    assert first["runs"] == 5 and first["cold"] == 1
    assert first["score"] > 3 > ranking["groups"][1]["score"]
    assert sum(group["runs"] for group in ranking["groups"]) == failing
    table = cli("runs", tmp_path, "--errors", "--by", "tag:tenant_id,hour", "--since", "1d")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"{failing} failing runs of 240")
    assert lines[2].split()[:2] == ["t_3", cluster_hour.split()[0]]
    assert_one_line_error(cli("runs", tmp_path, "--by", "colour"), "group by model, hour")


def test_the_html_chart_draws_the_top_groups_in_a_browser(tmp_path: Path) -> None:
    store = tmp_path / "store"
    seed_cluster(store)
    page = tmp_path / "groups.html"
    done = cli("runs", store, "--errors", "--by", "tag:tenant_id", "--html", page)
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert "http" not in text.replace("http-equiv", "").replace("http://www.w3.org", "")
    shown = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    dom = shown.stdout
    assert len(re.findall(r'<polyline class="series"', dom)) == 4
    legend = re.findall(r'<li class="legend">.*?</span>([^<]*)</li>', dom)
    assert legend[0].startswith("t_3: ")
    shot = tmp_path / "shot.png"
    drawn = chromium(tmp_path, f"--screenshot={shot}", "--window-size=900,700", page.as_uri())
    assert drawn.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 5000
    assert index_listing.index_files(open_store(store))
