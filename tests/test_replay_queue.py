"""Which recorded requests a replayed response waits for: those that started while it was
under way, in start order, each waited for until it is made again."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenttape._core.matching.matcher import Matcher, Remember
from agenttape._core.matching.replay_queue import ReplayQueue
from agenttape._core.models import Interaction, Request, Response


def interaction(path: str, started: float, duration: float) -> Interaction:
    return Interaction(
        Request("GET", f"http://127.0.0.1/{path}"),
        Response(200),
        started_at=1000.0 + started,
        duration=duration,
    )


def queue_of(*interactions: Interaction, prepared: bool = False) -> ReplayQueue:
    """A queue of ``interactions``; ``prepared``, its lookups built up front as a cassette's
    activation builds them, else on first use."""
    queue = ReplayQueue(Matcher())
    for one in interactions:
        queue.add(one, played=False)
    if prepared:
        queue.prepare()
    return queue


both_ways = pytest.mark.parametrize("prepared", [False, True], ids=["built-on-use", "prepared"])


@both_ways
def test_a_stream_waits_for_the_requests_that_started_while_it_ran(prepared: bool) -> None:
    stream = interaction("events", 0.0, 5.0)
    before = interaction("before", -1.0, 0.1)
    during = [interaction("call", 2.0, 0.1), interaction("close", 4.0, 0.1)]
    after = interaction("after", 6.0, 0.1)
    queue = queue_of(before, during[1], stream, after, during[0], prepared=prepared)
    precedents = queue.precedents(stream)
    assert precedents is not None
    assert precedents.starts == (2.0, 4.0)
    assert [queue.interactions[p] for p in precedents.positions] == during
    assert precedents.begun(1.0), "nothing recorded before offset 1 is waited for"
    assert not precedents.begun(3.0) and not precedents.begun(5.0)
    queue.take(queue.key(during[0].request))
    assert precedents.begun(3.0) and not precedents.begun(5.0)
    queue.take(queue.key(during[1].request))
    assert precedents.begun(5.0)
    assert queue.precedents(after) is None and queue.precedents(before) is None


@both_ways
def test_requests_recorded_later_join_the_start_order(prepared: bool) -> None:
    stream = interaction("events", 0.0, 5.0)
    queue = queue_of(stream, prepared=prepared)
    assert queue.precedents(stream) is None
    woken: list[str] = []
    queue.add(interaction("call", 1.0, 0.1), played=False)
    precedents = queue.precedents(stream)
    assert precedents is not None and precedents.starts == (1.0,)

    def wake() -> None:
        woken.append("served")

    precedents.watch(wake)
    queue.take(queue.key(Request("GET", "http://127.0.0.1/call")))
    assert woken == ["served"] and precedents.begun(5.0)
    precedents.unwatch(wake)
    queue.take(queue.key(stream.request))
    assert woken == ["served"]


@given(
    timings=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]),
            st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 2.5]) | st.none(),
        ),
        min_size=1,
        max_size=8,
    ),
    prepared=st.booleans(),
)
def test_the_queue_knows_when_no_response_has_precedents(
    timings: list[tuple[float, float | None]], prepared: bool
) -> None:
    """A queue whose responses never ran while another request started says so up front
    (replay then skips the lookup per request); otherwise each response's precedents are the
    requests that started after it and before its end."""
    recorded = [
        dataclasses.replace(interaction(f"r{n}", started, 0.0), duration=duration)
        for n, (started, duration) in enumerate(timings)
    ]
    queue = queue_of(*recorded, prepared=prepared)
    expected = {
        n: sorted(
            other.started_at - one.started_at
            for other in recorded
            if one.duration is not None
            and one.started_at < other.started_at < one.started_at + one.duration
        )
        for n, one in enumerate(recorded)
    }
    for n, one in enumerate(recorded):
        found = queue.precedents(one)
        assert (list(found.starts) if found else []) == expected[n]
    assert queue.overlapping or not any(expected.values())
    queue.prepare()
    assert queue.overlapping == any(expected.values())


class _SameHash:
    """A match key whose hash every other one shares."""

    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SameHash) and self.key == other.key


class CollidingMatcher(Matcher):
    """Keys that all collide in the index, as two of a large cassette's may."""

    def key(self, request: Request, remember: Remember = False, exact: bool = False) -> Hashable:
        return _SameHash(super().key(request, remember, exact))


@pytest.mark.parametrize("allow_repeats", [False, True])
def test_keys_of_one_hash_each_serve_their_own_interactions(allow_repeats: bool) -> None:
    first_a, b, second_a = (
        interaction("a", 0.0, 0.1),
        interaction("b", 1.0, 0.1),
        interaction("a", 2.0, 0.1),
    )
    queue = ReplayQueue(CollidingMatcher(), allow_repeats)
    for one in (first_a, b, second_a):
        queue.add(one, played=False)
    key_a, key_b = queue.key(first_a.request), queue.key(b.request)
    assert queue.take(queue.key(interaction("c", 0.0, 0.1).request)) is None
    assert queue.take(key_b) is b
    assert queue.take(key_a) is first_a
    assert queue.take(key_a) is second_a
    assert queue.take(key_a) is (second_a if allow_repeats else None)
    assert queue.take(key_b) is (b if allow_repeats else None)


def test_a_candidate_another_process_played_says_so(tmp_path: Path) -> None:
    """Under ``agenttape run`` the processes share one play log: the candidate a second
    process misses on was played by the first, and the miss says so."""
    from agenttape._tools.run_process import PlayLog

    log = tmp_path / "plays"
    first, second = (ReplayQueue(Matcher(), shared_plays=PlayLog(log)) for _ in range(2))
    for queue in (first, second):
        queue.add(interaction("a", 0, 0.1), played=False)
    request = Request("GET", "http://127.0.0.1/a")
    assert first.take(first.key(request)) is not None
    assert second.take(second.key(request)) is None
    (candidate,) = second.nearest(request)
    assert candidate.played and not candidate.differences
    assert (
        candidate.note == "played by another process of this run (agenttape run shares the plays)"
    )
    assert candidate.note in str(candidate)
    assert first.nearest(request)[0].note == ""  # played by the process itself: no note


def test_a_candidate_equal_in_every_field_and_unplayed_is_never_left_unexplained() -> None:
    """The last resort: nothing explains why a request equal to a recorded one in every
    field matched on was not served, and the line says so and what to look at."""
    queue = queue_of(interaction("a", 0, 0.1))
    (candidate,) = queue.nearest(Request("GET", "http://127.0.0.1/a"), path="c.msgpack")
    assert not candidate.played and not candidate.differences
    assert "identical request" not in str(candidate)
    assert candidate.note == (
        "equal in every field matched on (method, scheme, host, port, path, query, body) and "
        "not played, yet not served: compare it with the request sent (agenttape show "
        "c.msgpack --index 0) and report it"
    )
