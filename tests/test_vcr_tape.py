"""The tape behind the pytest-recording drop-in, driven directly: cassettes recorded by vcrpy
itself (JSON serializer here), replayed by agenttape as vcrpy would serve them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import vcr
from vcr.cassette import Cassette

import agenttape
from agenttape._tools.vcr_tape import VcrTape
from tests.servers import Seen, Server, json_reply


def app(seen: Seen) -> Any:
    return json_reply({"path": seen.path, "body": seen.body.decode() or None})


def tape(path: Path, record_mode: str, **options: Any) -> VcrTape:
    config = vcr.VCR(serializer="json").get_merged_config(
        path=str(path), record_mode=record_mode, **options
    )
    for key in ("path_transformer", "func_path_generator", "record_on_exception"):
        config.pop(key)
    return VcrTape(Cassette(**config), suffix=".json", record_mode=record_mode)


def test_vcrpy_semantics_over_a_json_cassette(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(app)
    other = serve(app)
    path = tmp_path / "chat.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(path)):
        first = httpx.post(f"{server.url}/a", json={"n": 1}).content
        second = httpx.post(f"{server.url}/a", json={"n": 2}).content
    served = len(server.seen)

    replay = tape(path, "none", ignore_hosts=["localhost"], allow_playback_repeats=False)
    replay.start()
    try:
        # vcrpy's default matching: method and URL; each recorded response once, in order.
        assert httpx.post(f"{server.url}/a", json={"n": 9}).content == first
        assert httpx.post(f"{server.url}/a", json={"n": 2}).content == second
        with pytest.raises(agenttape.UnmatchedInteractionError, match="record-mode"):
            httpx.post(f"{server.url}/a", json={"n": 3})
        # An ignored host goes to the network, unrecorded.
        live = httpx.get(f"{other.url.replace('127.0.0.1', 'localhost')}/live")
        assert live.json()["path"] == "/live"
    finally:
        replay.stop()
    assert len(server.seen) == served
    assert replay.vcr.play_count == 2 and replay.vcr.all_played
    assert [drift.differences for drift in replay.drifts] == [["body.n: expected 1, got 9"]]
    assert not path.with_suffix(".msgpack").exists()  # nothing recorded

    # Mode all: every request recorded; a loaded one no new recording matches is kept.
    again = tape(path, "all")
    again.start()
    try:
        httpx.post(f"{server.url}/b", json={"n": 4})
    finally:
        again.stop()
    saved = agenttape.load(path.with_suffix(".msgpack")).interactions
    assert [(i.request.url.rsplit("/", 1)[1], json.loads(i.request.body)["n"]) for i in saved] == [
        ("a", 1),
        ("a", 2),
        ("b", 4),
    ]
