"""Drift (recorded interactions the code no longer makes) is reported as asked, and a
cassette from a newer format names the agenttape version that reads it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import httpx
import msgpack
import pytest

import agenttape
from agenttape._core import meta
from agenttape._core.wire import codec
from tests.servers import Server, path_app


@pytest.fixture
def recorded(serve: Callable[..., Server], cassette_path: Path) -> str:
    """A cassette of /a, /b, /c; the server is stopped so replay is offline."""
    server = serve(path_app())
    with agenttape.use_cassette(cassette_path, mode="all"), httpx.Client() as client:
        for name in "abc":
            client.get(f"{server.url}/{name}")
    server.stop()
    return server.url


def replay(path: Path, url: str, names: str, mode: str = "none", **options: object) -> None:
    with agenttape.use_cassette(path, mode=mode, **options), httpx.Client() as client:
        for name in names:
            client.get(f"{url}/{name}")


def test_on_unused_warn_names_the_unplayed_interactions(recorded: str, cassette_path: Path) -> None:
    with pytest.warns(UserWarning) as caught:
        replay(cassette_path, recorded, "ab", on_unused="warn")
    (warning,) = caught
    message = str(warning.message)
    assert "1 recorded interaction of cassette" in message and "was never played" in message
    assert str(cassette_path) in message
    assert f"GET {recorded}/c" in message
    assert f"{recorded}/a" not in message


def test_on_unused_fail_raises_at_exit(recorded: str, cassette_path: Path) -> None:
    with pytest.raises(agenttape.AgentTapeError) as caught:
        replay(cassette_path, recorded, "a", on_unused="fail")
    assert f"GET {recorded}/b" in str(caught.value)
    assert f"GET {recorded}/c" in str(caught.value)
    assert not isinstance(caught.value, agenttape.UnmatchedInteractionError)


@pytest.mark.parametrize("on_unused", ["ignore", "warn", "fail"])
def test_no_drift_no_report(recorded: str, cassette_path: Path, on_unused: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replay(cassette_path, recorded, "abc", on_unused=on_unused)


def test_on_unused_ignore_is_silent(recorded: str, cassette_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replay(cassette_path, recorded, "", on_unused="ignore")


def test_a_failing_block_is_not_masked_by_drift(recorded: str, cassette_path: Path) -> None:
    with (
        pytest.raises(KeyError),
        agenttape.use_cassette(cassette_path, mode="none", on_unused="fail"),
    ):
        raise KeyError("the agent's own error")


def test_drift_is_not_reported_while_recording_new_episodes(
    recorded: str, cassette_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replay(cassette_path, recorded, "a", mode="new_episodes", on_unused="fail")


def test_on_unused_rejects_unknown_values(cassette_path: Path) -> None:
    with pytest.raises(ValueError, match="on_unused"):
        agenttape.use_cassette(cassette_path, on_unused="sometimes")


def test_cassette_from_a_newer_format_names_the_version_that_reads_it(
    serve: Callable[..., Server], cassette_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(path_app())
    with monkeypatch.context() as future:
        # This very code, after a format bump and a release.
        future.setattr(codec, "FORMAT_VERSION", codec.FORMAT_VERSION + 1)
        future.setattr(codec, "PLAIN_FORMAT", codec.FORMAT_VERSION)  # a bump for every file
        future.setattr(meta, "__version__", "9.4.0")
        with agenttape.use_cassette(cassette_path, mode="all"):
            httpx.get(f"{server.url}/x")
    written = cassette_path.read_bytes()
    assert msgpack.unpackb(written, timestamp=3)["agenttape"] == codec.FORMAT_VERSION + 1

    with pytest.raises(agenttape.CassetteFormatError) as caught:
        agenttape.load(cassette_path)
    message = str(caught.value)
    assert str(cassette_path) in message
    assert f"format {codec.FORMAT_VERSION + 1}" in message
    assert "agenttape 9.4.0" in message
    assert f"reads format {codec.FORMAT_VERSION}" in message
    assert 'pip install -U "agenttape-recorder>=9.4.0"' in message
    for mode in ("none", "once", "new_episodes", "all"):
        with (
            pytest.raises(agenttape.CassetteFormatError),
            agenttape.use_cassette(cassette_path, mode=mode),
        ):
            httpx.get(f"{server.url}/x")
    assert cassette_path.read_bytes() == written  # never overwritten


@pytest.mark.parametrize("writer", [None, 7, ""])
def test_newer_format_without_a_usable_writer_version(cassette_path: Path, writer: object) -> None:
    header = {} if writer is None else {"agenttape_version": writer}
    document = {"agenttape": codec.FORMAT_VERSION + 5, "header": header, "interactions": []}
    cassette_path.parent.mkdir(parents=True)
    cassette_path.write_bytes(msgpack.packb(document))
    with pytest.raises(agenttape.CassetteFormatError) as caught:
        agenttape.load(cassette_path)
    message = str(caught.value)
    assert f"format {codec.FORMAT_VERSION + 5}" in message
    assert "pip install -U agenttape-recorder" in message
    assert ">=" not in message
