"""The Bloom filters an index file's footer carries per row group."""

from __future__ import annotations

import msgpack
import pytest

from agenttape._production.index import tag_filters

pa = pytest.importorskip("pyarrow")


def test_a_filter_holds_every_item_and_few_others() -> None:
    members = {tag_filters.item("user_id", f"u{i}") for i in range(2_000)}
    others = [tag_filters.item("user_id", f"v{i}") for i in range(20_000)]
    field_ = tag_filters.bloom(members)
    assert all(tag_filters.may_hold(field_, member) for member in members)
    passed = sum(tag_filters.may_hold(field_, other) for other in others)
    # 12 bits and 4 probes an item: about 0.6 % pass; far more means the probes collide.
    assert passed < len(others) * 0.015


def test_one_filter_per_row_group_each_naming_its_own_tags() -> None:
    tags = [[("tenant", "a")]] * 3 + [[("tenant", "b")]] * 3 + [[("tenant", "c")]]
    table = pa.table({"tags": pa.array(tags, type=pa.map_(pa.string(), pa.string()))})
    entry = msgpack.unpackb(tag_filters.of(table, 3), raw=False)
    groups = [bytes(group) for group in entry["groups"]]
    assert entry["rows"] == 3 and entry["probes"] == tag_filters.FILTER_PROBES
    assert len(groups) == 3
    held = [
        [tag_filters.may_hold(group, tag_filters.item("tenant", name)) for name in "abc"]
        for group in groups
    ]
    assert [row.index(True) for row in held] == [0, 1, 2]
