"""Placeholder provider keys while replaying: an SDK client made without a key starts and
replays, and ``os.environ`` (every thread's) is never edited for it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._adapters.sdk_keys import for_children
from agenttape._core import meta
from agenttape._core.provider_keys import PLACEHOLDER, PROVIDER_KEY_VARIABLES
from agenttape._core.wire import codec
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


MODELS = {"object": "list", "data": [], "has_more": False, "first_id": None, "last_id": None}


def _clients(base_url: str, **key: str) -> list[Any]:
    """Every client class of both SDKs, made as a program makes them (no key: the SDK looks
    for one), inside the running loop for the async ones."""
    import anthropic
    import openai

    async def made_in_a_loop(client_class: Any, **options: Any) -> Any:
        return client_class(**options)

    made = []
    for client_class, url in [
        (openai.OpenAI, f"{base_url}/v1"),
        (openai.AsyncOpenAI, f"{base_url}/v1"),
        (anthropic.Anthropic, base_url),
        (anthropic.AsyncAnthropic, base_url),
    ]:
        options = {"base_url": url, "max_retries": 0, **key}
        if client_class.__name__.startswith("Async"):
            made.append(asyncio.run(made_in_a_loop(client_class, **options)))
        else:
            made.append(client_class(**options))
    return made


def _list_models(client: Any) -> Any:
    listed = client.models.list()
    if asyncio.iscoroutine(listed) or hasattr(listed, "__await__"):

        async def awaited() -> Any:
            return await listed

        return asyncio.run(awaited())
    return listed


@pytest.mark.usefixtures("no_keys")
def test_sdks_made_in_a_replay_start_and_replay_with_os_environ_untouched(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    """Constructed with no key anywhere, inside a replay, each client of both SDKs gets the
    placeholder at its constructor and replays; ``os.environ`` is the same during and after."""
    server = serve(lambda seen: json_reply(MODELS))
    path = tmp_path / "models.msgpack"
    with agenttape.use_cassette(path, mode="once"):
        for client in _clients(server.url, api_key="sk-real-for-recording"):
            _list_models(client)
    server.stop()
    before = dict(os.environ)
    with agenttape.use_cassette(path, mode="none") as cassette:
        clients = _clients(server.url)
        assert dict(os.environ) == before
        assert [client.api_key for client in clients] == [PLACEHOLDER] * 4
        for client in clients:
            _list_models(client)
        assert cassette.all_played
        assert dict(os.environ) == before
    assert dict(os.environ) == before


@pytest.mark.usefixtures("no_keys")
def test_a_key_given_or_set_is_the_one_used(tape: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import anthropic
    import openai

    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")  # empty: no key, as the SDK reads it
    with agenttape.use_cassette(tape, mode="none"):
        assert openai.OpenAI().api_key == "sk-real"
        assert openai.OpenAI(api_key="sk-given").api_key == "sk-given"
        assert anthropic.Anthropic().api_key == PLACEHOLDER
        assert anthropic.Anthropic(auth_token="tok").api_key in (None, "")
    assert os.environ["OPENAI_API_KEY"] == "sk-real"
    assert os.environ["ANTHROPIC_API_KEY"] == ""


@pytest.mark.usefixtures("no_keys")
@pytest.mark.filterwarnings("ignore:nothing was recorded")
def test_outside_a_replay_the_sdk_asks_for_its_key_as_it_always_does(
    tape: Path, tmp_path: Path
) -> None:
    import openai

    with pytest.raises(openai.OpenAIError):
        openai.OpenAI()
    for path, mode in [(tape, "all"), (tape, "new_episodes"), (tmp_path / "new.msgpack", "once")]:
        with (
            agenttape.use_cassette(path, mode=mode),  # type: ignore[arg-type]
            pytest.raises(openai.OpenAIError),
        ):
            openai.OpenAI()


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


@pytest.mark.usefixtures("no_keys")
def test_other_sdks_and_frameworks_reading_the_environment_get_the_placeholder(
    tape: Path,
) -> None:
    """google-genai and Cohere read their keys with ``os.environ.get``/``os.getenv``
    as frameworks do: inside a replay they get the placeholder, while indexing, iterating and
    copying the environment show it as it is; after the replay they get nothing again."""
    import cohere
    from cohere.core.api_error import ApiError
    from google import genai

    with pytest.raises(ValueError):
        genai.Client()
    with pytest.raises(ApiError):
        cohere.ClientV2()
    with agenttape.use_cassette(tape, mode="none"):
        assert os.getenv("GOOGLE_API_KEY") == PLACEHOLDER
        assert os.environ.get("CO_API_KEY") == PLACEHOLDER
        assert genai.Client()._api_client.api_key == PLACEHOLDER
        assert cohere.ClientV2() is not None
        assert "OPENAI_API_KEY" not in os.environ
        assert PLACEHOLDER not in dict(os.environ).values()
        with pytest.raises(KeyError):
            os.environ["OPENAI_API_KEY"]
        assert os.environ.get("HOME") == os.environ["HOME"]
        assert os.environ.get("AGENTTAPE_NOT_A_KEY", "fallback") == "fallback"
    assert os.getenv("GOOGLE_API_KEY") is None
    assert os.environ.get("OPENAI_API_KEY", "unset") == "unset"
