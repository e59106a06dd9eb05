"""Header pairs decoded once and shared between interactions, in tuples the collector leaves alone."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._adapters import header_tables
from tests.servers import Server, json_reply


@pytest.fixture
def server(serve: Any) -> Server:
    reply = json_reply({"ok": True}, headers=[("X-Reply", "caf\xe9")])
    started: Server = serve(lambda seen: reply)
    return started


def test_every_byte_survives_and_pairs_are_shared(server: Server, cassette_path: Path) -> None:
    raw = [(b"X-Odd", b"caf\xe9 \xff"), (b"x-odd", b"2"), (b"Accept", b"*/*")]
    with agenttape.use_cassette(cassette_path, mode="once"), httpx.Client() as client:
        for _ in range(2):
            client.get(server.url + "/same", headers=raw).read()
    first, second = (i.request for i in agenttape.load(cassette_path).interactions)
    for name, value in raw:
        assert (name.decode("latin-1"), value.decode("latin-1")) in first.headers
    live = header_tables.decode_header_set([(b"X-Odd", b"caf\xe9 \xff")])
    again = header_tables.decode_header_set([(b"X-Odd", b"caf\xe9 \xff")])
    assert live == again == (("X-Odd", "caf\xe9 \xff"),)
    assert live is again
    assert [(k.encode("latin-1"), v.encode("latin-1")) for k, v in live] == raw[:1]
    assert second.headers == first.headers


def test_a_recorded_interaction_leaves_three_objects_to_the_collector(
    server: Server, cassette_path: Path
) -> None:
    with (
        agenttape.use_cassette(cassette_path, mode="all") as cassette,
        httpx.Client() as client,
    ):
        client.get(server.url + "/a").read()
        client.get(server.url + "/b").read()
    first, second = (i.request.headers for i in cassette.interactions)
    # One immutable set for both requests, which the garbage collector stops walking.
    assert isinstance(first, tuple) and first is second
    # A tuple of tuples is let go one collection after the tuples inside it.
    gc.collect()
    gc.collect()
    for interaction in cassette.interactions:
        response = interaction.response
        assert response is not None and response.chunks
        # Headers, chunk offsets and their pairs are tuples of atoms: not walked again.
        tracked = [
            value
            for value in (interaction.request, response)
            for value in gc.get_referents(value)
            if gc.is_tracked(value) and not isinstance(value, type)
        ]
        assert tracked == []
    # Response headers vary as a whole (a date), but a repeated pair is still kept once.
    shared = [
        pair
        for interaction in cassette.interactions
        for pair in (interaction.response.headers if interaction.response else [])
        if pair == ("X-Reply", "caf\xe9")
    ]
    assert len(shared) == 2 and shared[0] is shared[1]


def test_tables_stay_bounded() -> None:
    largest = {"pairs": 0, "sets": 0, "texts": 0}
    for number in range(header_tables._LIMIT + 10):
        text = str(number).encode()
        header_tables.decode_headers([(b"X-Id", text)])
        header_tables.decode_header_set([(b"X-Id", text)])
        header_tables.decode_text(text)
        for name in largest:
            largest[name] = max(largest[name], len(getattr(header_tables, f"_{name}")))
    assert largest == {
        "pairs": header_tables._LIMIT,
        "sets": header_tables._SET_LIMIT,
        "texts": header_tables._LIMIT,
    }
