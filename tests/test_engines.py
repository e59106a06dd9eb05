"""The run index read unchanged by other engines: Spark (PySpark, local mode) and DuckDB run the
statements docs/run-index.md gives and get the same rows; the Trino, Athena and ClickHouse
statements name the index's columns with the index's types."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenttape._production.index import batch as index_batch
from agenttape._production.index import listing as index_listing
from agenttape._production.index import reader as index_reader
from agenttape._production.index import rows as row_format
from agenttape._production.index.rebuild import rebuild_index
from agenttape._production.stored_runs import list_runs
from tests.cli_support import signals_as_at_a_terminal, write_run

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "run-index.md").read_text(encoding="utf-8")
NOW = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
ERRORS_ONLY = " AND status IN ('raised', 'flagged', 'failed')"


def statement(engine: str) -> str:
    """The first SQL block under the page's ``### engine`` heading."""
    section = PAGE.split(f"### {engine}\n", 1)[1].split("\n### ", 1)[0]
    return section.split("```sql\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs of two users over ten days, some failing; the newest day's index in two files,
    as a compaction half done leaves it (one run's row in both)."""
    root = tmp_path_factory.mktemp("engines")
    statuses = ["ok", "failed", "flagged", "raised", "ok"]
    for number in range(30):
        created = NOW - _dt.timedelta(days=number % 10, hours=number % 3)
        if created.date() != NOW.date() and (NOW - created).days < 1:
            created -= _dt.timedelta(days=1)  # keep clear of the 7-day edge's day
        user = "u_7710" if number % 2 else "u_1"
        write_run(root, f"r_{number:02d}", created, {"user_id": user}, statuses[number % 5])
    rebuild_index(root)
    [newest] = [path for path in sorted((root / "_index").glob("date=*/*.parquet"))][-1:]
    shutil.copy(newest, newest.with_name("20991231T000000.000000Z-halfmerged.parquet"))
    return root


def duckdb_rows(store: Path) -> list[tuple[Any, ...]]:
    sql = statement("DuckDB").replace("'runs/_index/", f"'{store}/_index/")
    sql = sql.replace(
        "AND tags['user_id'] = 'u_7710'", "AND tags['user_id'] = 'u_7710'" + ERRORS_ONLY
    )
    found = duckdb.sql(sql).fetchall()
    return [
        (run_id, status, path, created.astimezone(_dt.UTC))
        for run_id, created, status, _n, path, *_ in found
    ]


SPARK_QUERY = """
import json, sys
from pyspark.sql import SparkSession

sql, warehouse = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[1]")
    .appName("agenttape-index")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.warehouse.dir", warehouse)
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.shuffle.partitions", "1")
    .getOrCreate()
)
try:
    rows = spark.sql(sql).collect()
finally:
    spark.stop()
print(json.dumps([[r.run_id, r.status, r.path, r.created.isoformat()] for r in rows]))
"""


def spark_rows(sql: str, warehouse: Path) -> list[tuple[str, str, str, _dt.datetime]]:
    """What Spark (local, on the machine's Java and pyspark; .ci/run installs both, a test
    installs nothing) answers ``sql`` with. Spark runs in a Python process of its own, as a
    reader of the index would, with the environment a shell gives it: the test process's
    state (what earlier tests left in it) cannot stop its JVM from starting."""
    if shutil.which("java") is None:
        pytest.skip(
            "Java is not installed (Debian package openjdk-17-jre-headless); .ci/run installs it"
        )
    pytest.importorskip("pyspark", reason="pyspark is not installed here; .ci/run installs it")
    names = ("PATH", "HOME", "LANG", "JAVA_HOME", "TMPDIR")
    environment = {name: os.environ[name] for name in names if name in os.environ}
    for _attempt in range(2):  # a JVM that exits while starting on a loaded machine
        with signals_as_at_a_terminal():
            done = subprocess.run(
                [sys.executable, "-c", SPARK_QUERY, sql, str(warehouse)],
                capture_output=True,
                text=True,
                env=environment,
                timeout=300,
            )
        if done.returncode == 0:
            found = json.loads(done.stdout.splitlines()[-1])
            return [
                (run_id, status, path, _dt.datetime.fromisoformat(created).replace(tzinfo=_dt.UTC))
                for run_id, status, path, created in found
            ]
    pytest.fail(f"Spark did not answer; what it said last:\n{done.stderr[-3000:]}")


def test_spark_and_duckdb_give_the_same_rows(store: Path, tmp_path: Path) -> None:
    sql = statement("Spark SQL").rstrip().rstrip(";")
    sql = sql.replace("s3a://acme-agent-runs/prod/_index", f"file://{store}/_index")
    sql = sql.replace(
        "AND tags['user_id'] = 'u_7710'", "AND tags['user_id'] = 'u_7710'" + ERRORS_ONLY
    )
    from_spark = spark_rows(sql, tmp_path / "spark-warehouse")
    from_duckdb = duckdb_rows(store)
    print("Spark:  ", [row[:2] for row in from_spark])
    print("DuckDB: ", [row[:2] for row in from_duckdb])
    assert from_spark == from_duckdb
    assert len(from_spark) >= 4
    # And both are what agenttape runs lists, by day.
    since = (NOW - _dt.timedelta(days=7)).replace(hour=0, minute=0, second=0)
    listed = list_runs(store, tags={"user_id": "u_7710"}, since=since, errors=True)
    assert [info.run_id for info in listed] == [row[0] for row in from_spark]


# -- the other engines' statements against the schema -------------------------------------------

TYPES = {
    "string": "string",
    "varchar": "string",
    "bigint": "int64",
    "double": "double",
    "timestamp": "timestamp",
    "timestamp(3)": "timestamp",
    "array<string>": "list<string>",
    "array(varchar)": "list<string>",
    "map<string, string>": "map<string,string>",
    "map(varchar, varchar)": "map<string,string>",
    "binary": "binary",
    "varbinary": "binary",
}


def arrow_type(field: Any) -> str:
    kind = field.type
    if pa.types.is_timestamp(kind):
        return "timestamp"
    if pa.types.is_list(kind):
        return f"list<{kind.value_type}>"
    if pa.types.is_map(kind):
        return f"map<{kind.key_type},{kind.item_type}>"
    return {"large_string": "string"}.get(str(kind), str(kind))


def declared_columns(sql: str) -> dict[str, str]:
    """``name type`` pairs of a CREATE TABLE's column list."""
    body = sql.split("(", 1)[1]
    columns = {}
    depth = 0
    part = ""
    for char in body:
        if char in "(<":
            depth += 1
        elif char in ")>":
            if depth == 0:
                break
            depth -= 1
        if char == "," and depth == 0:
            columns.update([_column(part)])
            part = ""
        else:
            part += char
    columns.update([_column(part)])
    return columns


def _column(text: str) -> tuple[str, str]:
    name, kind = text.strip().split(None, 1)
    return name.strip('`"'), kind.strip()


@pytest.mark.parametrize("engine", ["Trino", "Athena"])
def test_the_create_table_statements_match_the_parquet_schema(engine: str) -> None:
    declared = declared_columns(statement(engine))
    schema = {field.name: arrow_type(field) for field in row_format.schema()}
    partition = declared.pop("date", None)
    if engine == "Athena":
        assert "PARTITIONED BY (`date` string)" in statement(engine)
    else:
        assert partition == "varchar"
    assert list(declared) == list(schema)
    assert {name: TYPES[kind] for name, kind in declared.items()} == schema


@pytest.mark.parametrize("engine", ["DuckDB", "Spark SQL", "Trino", "ClickHouse"])
def test_every_query_names_only_columns_the_index_has(engine: str) -> None:
    sql = statement(engine)
    selected = re.search(r"SELECT (.*?)\n", sql)
    assert selected is not None
    names = [name.strip() for name in selected.group(1).split(",")]
    schema = set(row_format.schema().names)
    assert set(names) <= schema, set(names) - schema
    for column in ("path", "tags", "created"):
        assert column in sql


# -- reading only what a listing needs ----------------------------------------------------------


def test_a_listing_by_tag_keeps_the_newest_row_of_each_run(tmp_path: Path) -> None:
    """The newest row of a run decides, even when an older row matches and it does not (a
    run id used again in a day): the two-step read looks for newer rows in later files."""
    from agenttape._production.store import open_store

    store = open_store(tmp_path)
    day = NOW.strftime("%Y-%m-%d")

    def row(user: str, status: str = "ok") -> row_format.IndexRow:
        header = {
            "run_id": "r_1",
            "created_at": NOW,
            "tags": {"user_id": user},
            "run": {"status": status},
        }
        return row_format.describe(header, f"{day}/r_1.msgpack", 10)

    index_batch.write_rows(store, [row("u_1")], when="20260101T000000.000000Z")
    index_batch.write_rows(store, [row("u_2", "failed")], when="20260101T000001.000000Z")
    files = index_listing.index_files(store)
    with index_reader.IndexReader(store, files) as reader:
        assert reader.select(files, since=None, errors=False, tags={"user_id": "u_1"}) == []
        [newest] = reader.select(files, since=None, errors=True, tags={"user_id": "u_2"})
        assert newest.status == "failed"
        assert len(reader.select(files, since=None, errors=False, tags={})) == 1


def test_index_files_are_written_in_small_row_groups(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    rows = [
        row_format.describe(
            {"run_id": f"r_{n}", "created_at": NOW, "tags": {"user_id": f"u_{n}"}},
            f"{NOW:%Y-%m-%d}/r_{n}.msgpack",
            10,
        )
        for n in range(10_000)
    ]
    data = row_format.encode(rows)
    (tmp_path / "one.parquet").write_bytes(data)
    assert pq.ParquetFile(tmp_path / "one.parquet").num_row_groups == 3
