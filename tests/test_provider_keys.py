from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import agenttape
from agenttape._core import codec, meta
from agenttape._core.provider_keys import (
    PLACEHOLDER,
    PROVIDER_KEY_VARIABLES,
    SDK_KEY_VARIABLES,
    for_children,
)
from tests.servers import Server, json_reply


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROVIDER_KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tape(tmp_path: Path) -> Path:
    path = tmp_path / "tape.msgpack"
    path.write_bytes(codec.encode(meta.new_header(), []))
    return path


@pytest.mark.usefixtures("no_keys")
def test_replay_fills_missing_keys_for_its_duration_and_removes_them_after(tape: Path) -> None:
    import anthropic
    import openai

    with agenttape.use_cassette(tape, mode="none"):
        filled = {name for name in PROVIDER_KEY_VARIABLES if os.environ.get(name) == PLACEHOLDER}
        assert filled >= {*SDK_KEY_VARIABLES["openai"], *SDK_KEY_VARIABLES["anthropic"]}
        openai.OpenAI()  # constructors that refuse to start without a key now start
        anthropic.Anthropic()
    assert not any(name in os.environ for name in PROVIDER_KEY_VARIABLES)


@pytest.mark.usefixtures("no_keys")
def test_only_the_keys_of_imported_sdks_are_filled_and_an_sdk_imported_meanwhile_gets_its_own(
    tape: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every variable added is one more that requests scans on each request."""
    for sdk in SDK_KEY_VARIABLES:
        monkeypatch.delitem(sys.modules, sdk, raising=False)
    monkeypatch.delitem(sys.modules, "voyageai", raising=False)
    voyage = tape.parent / "voyageai"
    voyage.mkdir()
    (voyage / "__init__.py").write_text(
        "import os\nKEY_AT_IMPORT = os.environ.get('VOYAGE_API_KEY')\n"
    )
    monkeypatch.syspath_prepend(str(tape.parent))
    with agenttape.use_cassette(tape, mode="none"):
        assert not any(name in os.environ for name in PROVIDER_KEY_VARIABLES)
        module = importlib.import_module("voyageai")
        assert module.KEY_AT_IMPORT == PLACEHOLDER
        assert [name for name in PROVIDER_KEY_VARIABLES if name in os.environ] == ["VOYAGE_API_KEY"]
    assert "VOYAGE_API_KEY" not in os.environ


@pytest.mark.usefixtures("no_keys")
def test_real_and_empty_keys_are_left_as_they_were(
    tape: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    with agenttape.use_cassette(tape, mode="none"):
        assert os.environ["OPENAI_API_KEY"] == "sk-real"
        assert os.environ["ANTHROPIC_API_KEY"] == PLACEHOLDER
    assert os.environ["OPENAI_API_KEY"] == "sk-real"
    assert os.environ["ANTHROPIC_API_KEY"] == ""


@pytest.mark.usefixtures("no_keys")
def test_recording_modes_never_fill_keys(tape: Path, tmp_path: Path) -> None:
    import openai  # noqa: F401

    with agenttape.use_cassette(tmp_path / "new.msgpack", mode="once"):
        assert "OPENAI_API_KEY" not in os.environ
    with agenttape.use_cassette(tape, mode="all"):
        assert "OPENAI_API_KEY" not in os.environ
    with agenttape.use_cassette(tape, mode="new_episodes"):
        assert "OPENAI_API_KEY" not in os.environ
    with agenttape.use_cassette(tape, mode="once"):  # an existing file: replay only
        assert os.environ["OPENAI_API_KEY"] == PLACEHOLDER


@pytest.mark.usefixtures("no_keys")
def test_overlapping_replays_keep_the_keys_until_the_last_one_ends(tape: Path) -> None:
    import openai  # noqa: F401

    outer = agenttape.use_cassette(tape, mode="none")
    inner = agenttape.use_cassette(tape, mode="none")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert os.environ["OPENAI_API_KEY"] == PLACEHOLDER
    inner.__exit__(None, None, None)
    assert "OPENAI_API_KEY" not in os.environ


@pytest.mark.usefixtures("no_keys")
def test_keys_are_restored_when_the_block_raises_and_program_values_are_kept(tape: Path) -> None:
    with pytest.raises(RuntimeError), agenttape.use_cassette(tape, mode="none"):
        os.environ["GROQ_API_KEY"] = "set-by-the-program"
        raise RuntimeError("agent failed")
    assert "OPENAI_API_KEY" not in os.environ
    assert os.environ.pop("GROQ_API_KEY") == "set-by-the-program"


def test_a_real_key_never_reaches_a_cassette(
    serve: Callable[..., Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openai

    key = "sk-proj-" + "AnotherRealLookingKey0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    server = serve(
        lambda seen: json_reply(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hi"},
                        "finish_reason": "stop",
                    }
                ],
            }
        )
    )
    path = tmp_path / "rec.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        openai.OpenAI(base_url=server.url + "/v1").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}]
        )
    assert server.seen[0].header("authorization") == f"Bearer {key}"
    assert key.encode() not in path.read_bytes()
    assert (
        httpx.URL(agenttape.load(path).interactions[0].request.url).path == "/v1/chat/completions"
    )


@pytest.mark.usefixtures("no_keys")
def test_a_child_program_of_a_replay_gets_every_key_whatever_this_process_imported(
    tape: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MISTRAL_API_KEY", "sk-real-one")
    assert for_children() == {}  # no replay: nothing
    with agenttape.use_cassette(tape, mode="none"):
        child = {**os.environ, **for_children()}  # as agenttape run builds it
    assert child["MISTRAL_API_KEY"] == "sk-real-one"  # a real key stays as it is
    assert {child[name] for name in PROVIDER_KEY_VARIABLES if name != "MISTRAL_API_KEY"} == {
        PLACEHOLDER
    }
    assert for_children() == {}
