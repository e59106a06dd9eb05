from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenttape._core import json_values

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.datetimes()
    | st.datetimes(timezones=st.just(dt.UTC))
)
keys = st.text() | st.sampled_from(["$bytes", "$datetime", "$map"]) | st.integers(-5, 5)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=12,
)


def _as_replayed(value: Any) -> Any:
    """What a round trip gives back: tuples become lists (as with msgpack)."""
    if isinstance(value, (list, tuple)):
        return [_as_replayed(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_replayed(item) for key, item in value.items()}
    return value


@given(values)
def test_round_trip(value: Any) -> None:
    data = json_values.dumps(json_values.to_json(value, "test"))
    json.loads(data)  # plain JSON on disk
    assert json_values.loads(data) == _as_replayed(value)


def test_lookalike_tags_stay_user_data() -> None:
    value = {"$bytes": "not base64 at all"}
    assert json_values.to_json(value, "x") == {"$map": [["$bytes", "not base64 at all"]]}
    assert json_values.loads(json_values.dumps(json_values.to_json(value, "x"))) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (object(), "result is a builtins.object"),
        ({"a": [1, {2}]}, "result at a[1] is a builtins.set"),
        (2**64, "result is an int too large"),
        ({"when": dt.date(2026, 1, 1)}, "result at when is a datetime.date"),
    ],
)
def test_unfit_values_are_named_with_their_place(value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        json_values.to_json(value, "result")
