"""Bodies as a project's serializer gives them: a serializer that stores JSON bodies parsed and
rebuilds them on read gives them another length than the recorded Content-Length. vcrpy
hands a client the whole body; so does the drop-in, through every client, offline."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

# Imported here, once: an in-process run would otherwise import yaml anew after the one
# before it dropped it, and libyaml's C loader keeps the first import's node classes.
import vcr  # noqa: F401
import yaml

from agenttape._tools.vcr import read_vcr

pytest_plugins = ["pytester"]

DOCUMENT = {"content": [{"text": "where is my order", "type": "text"}], "id": "msg_1"}
"""Its keys in order: vcrpy's YAML writes a mapping's keys sorted."""
BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com"
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"

PRETTY = '''
"""Response bodies that are JSON stored parsed, for readable cassettes; rebuilt on read."""
import json

from vcr.serializers import yamlserializer


def serialize(cassette_dict):
    for interaction in cassette_dict["interactions"]:
        body = interaction["response"]["body"]
        try:
            body["json"] = json.loads(body["string"])
        except (TypeError, ValueError):
            continue
        del body["string"]
    return yamlserializer.serialize(cassette_dict)


def deserialize(cassette_string):
    data = yamlserializer.deserialize(cassette_string)
    for interaction in data["interactions"]:
        body = interaction["response"]["body"]
        if "json" in body:
            body["string"] = json.dumps(body.pop("json"))
    return data
'''

CONFTEST = """
import pytest

import pretty


def pytest_recording_configure(config, vcr):
    vcr.register_serializer("pretty", pretty)


@pytest.fixture(scope="module")
def vcr_config():
    return {"serializer": "pretty"}
"""

TESTS = f"""
import asyncio
import json
import urllib.request

import aiohttp
import boto3
import httpx
import pytest
import requests

URL = "http://api.example.test/v1/messages/1"
WHOLE = json.dumps({DOCUMENT!r}).encode()
FITS = str(len(WHOLE))


@pytest.mark.vcr("api.pretty")
def test_requests():
    answer = requests.get(URL)
    assert answer.content == WHOLE
    assert answer.headers["Content-Length"] == FITS


@pytest.mark.vcr("api.pretty")
@pytest.mark.parametrize("library", ["httpx", "httpx2"])
def test_httpx(library):
    client = pytest.importorskip(library)
    answer = client.get(URL)
    assert answer.content == WHOLE
    assert answer.headers["Content-Length"] == FITS


@pytest.mark.vcr("api.pretty")
def test_aiohttp():
    async def get():
        async with aiohttp.ClientSession() as session, session.get(URL) as answer:
            return await answer.read(), answer.headers["Content-Length"]

    assert asyncio.run(get()) == (WHOLE, FITS)


@pytest.mark.vcr("api.pretty")
def test_http_client():
    with urllib.request.urlopen(URL) as answer:
        assert answer.read() == WHOLE
        assert answer.headers["Content-Length"] == FITS


@pytest.mark.vcr("bedrock.pretty")
def test_bedrock():
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )
    answer = client.invoke_model(modelId={MODEL!r}, body=json.dumps({{"max_tokens": 8}}))
    assert answer["body"].read() == WHOLE
    assert answer["ResponseMetadata"]["HTTPHeaders"]["content-length"] == FITS
    converse = client.converse(modelId={MODEL!r}, messages=[])
    assert converse["output"] == {{"message": {{"role": "assistant", "content": []}}}}
"""


def interaction(
    method: str, uri: str, sent: bytes, stored: object, asked: str | None = None
) -> dict[str, object]:
    """One interaction as the project's serializer stores it: the response body parsed, the
    Content-Length of the bytes the server sent."""
    return {
        "request": {"method": method, "uri": uri, "body": asked, "headers": {}},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"], "Content-Length": [str(len(sent))]},
            "body": {"json": stored},
        },
    }


def write_cassettes(folder: Path, indent: int | None) -> None:
    """The cassettes as recorded from a server that sent its JSON compact (``indent`` None:
    the rebuilt body is longer) or indented (it is shorter)."""
    separators = (",", ":") if indent is None else None
    sent = json.dumps(DOCUMENT, indent=indent, separators=separators).encode()
    assert len(sent) != len(json.dumps(DOCUMENT))
    folder.mkdir(parents=True)
    invoke = f"{BEDROCK}/model/{MODEL.replace(':', '%3A')}"
    conversed = {"output": {"message": {"role": "assistant", "content": []}}}
    cassettes = {
        "api.pretty": [interaction("GET", "http://api.example.test/v1/messages/1", sent, DOCUMENT)],
        "bedrock.pretty": [
            interaction("POST", f"{invoke}/invoke", sent, DOCUMENT, '{"max_tokens": 8}'),
            interaction(
                "POST",
                f"{invoke}/converse",
                json.dumps(conversed, indent=indent, separators=separators).encode(),
                conversed,
                '{"messages": []}',
            ),
        ],
    }
    for name, interactions in cassettes.items():
        text = yaml.safe_dump({"interactions": interactions, "version": 1})
        (folder / name).write_text(text)


@pytest.mark.parametrize("indent", [None, 2], ids=["rebuilt-longer", "rebuilt-shorter"])
def test_a_body_rebuilt_by_the_serializer_reaches_every_client_whole(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, indent: int | None
) -> None:
    pytester.makepyfile(pretty=PRETTY, conftest=CONFTEST, test_bodies=textwrap.dedent(TESTS))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.syspathinsert()
    write_cassettes(pytester.path / "cassettes" / "test_bodies", indent)
    monkeypatch.setenv("AGENTTAPE_CACHE_DIR", str(pytester.path / "cache"))
    result = pytester.runpytest_inprocess("-p", "no:recording", "-p", "no:cacheprovider")
    # httpx2 where it is installed (an environment with an older vcrpy may have none)
    httpx2 = importlib.util.find_spec("httpx2") is not None
    result.assert_outcomes(passed=5 + httpx2, skipped=1 - httpx2)
    assert "changed since recording" not in result.stdout.str()


def test_a_length_that_describes_no_stored_body_is_kept(tmp_path: Path) -> None:
    """A HEAD answer and a 304 tell a length the stored body does not have, and are right
    to: only a length that frames the stored body is fitted to it. A chunked body has no
    length: one a hook wrote beside its Transfer-Encoding goes (aiohttp refuses the two)."""
    source = tmp_path / "kept.yaml"

    def answered(method: str, code: int, headers: dict[str, list[str]], body: str) -> object:
        return {
            "request": {"method": method, "uri": "http://a.test/", "body": None, "headers": {}},
            "response": {
                "status": {"code": code, "message": ""},
                "headers": headers,
                "body": {"string": body},
            },
        }

    length = {"Content-Length": ["1234"]}
    chunked = {"Transfer-Encoding": ["chunked"], "Content-Length": ["1234"]}
    interactions = [
        answered("HEAD", 200, length, ""),
        answered("GET", 304, length, ""),
        answered("GET", 200, chunked, "data"),
        answered("GET", 200, {**length, "X-Kept": ["1"]}, "body"),
    ]
    source.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}))
    read = [i.response.headers for i in read_vcr(source)[0] if i.response is not None]
    assert read[:3] == [
        [("Content-Length", "1234")],
        [("Content-Length", "1234")],
        [("Transfer-Encoding", "chunked")],
    ]
    assert read[3] == [("Content-Length", "4"), ("X-Kept", "1")]
