"""What the pytest-recording drop-in reads from files others may have written: YAML cassettes
are held to import-vcr's bounds before anything expands them, and the parse cache is read
only from a folder that is this user's alone."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import msgpack
import pytest

# Imported here, once: an in-process run would otherwise import yaml anew after the one
# before it dropped it, and libyaml's C loader keeps the first import's node classes.
import vcr  # noqa: F401

from agenttape._tools.vcr import SCALAR_LIMIT
from tests.cli_support import bounded
from tests.test_vcr import hidden_laughs, laughs

pytest_plugins = ["pytester"]

HOSTILE = """
import httpx
import pytest


@pytest.mark.vcr
@pytest.mark.parametrize("name", ["bomb", "hidden", "deep", "huge"])
def test_refused(name):
    pass


@pytest.mark.vcr
def test_fine():
    assert httpx.get("http://127.0.0.1/").content == b"ok"
"""


def cassette(header: str, body: str = "ok") -> str:
    """A vcrpy cassette whose one response has ``header`` (YAML) as a header's value."""
    return (
        "interactions:\n"
        "- request: {body: null, headers: {}, method: GET, uri: 'http://127.0.0.1/'}\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        f"    headers: {{X-Value: {header}}}\n"
        f"    body: {{string: {body}}}\n"
        "version: 1\n"
    )


def test_hostile_yaml_is_refused_naming_the_file_in_bounded_time_and_memory(
    tmp_path: Path,
) -> None:
    """An alias bomb (under 1 KB for gigabytes; its anchors in plain sight, or behind byte
    order marks), a nesting 100,000 deep and a scalar past ``SCALAR_LIMIT``, each refused
    before it is expanded, parsed or cached, in a pytest run whose address space is capped:
    one that expanded them would die, not eat the machine."""
    (tmp_path / "test_hostile.py").write_text(textwrap.dedent(HOSTILE))
    folder = tmp_path / "cassettes" / "test_hostile"
    folder.mkdir(parents=True)
    (folder / "test_refused[bomb].yaml").write_text(laughs(9))
    (folder / "test_refused[hidden].yaml").write_text(hidden_laughs(9))
    (folder / "test_refused[deep].yaml").write_text(cassette("[" * 100_000 + "]" * 100_000))
    with (folder / "test_refused[huge].yaml").open("w") as huge:
        huge.write(cassette("a" * (SCALAR_LIMIT + 1)))
    (folder / "test_fine.yaml").write_text(cassette("fine"))
    cache = tmp_path / "cache"
    env = {**os.environ, "AGENTTAPE_CACHE_DIR": str(cache), "COLUMNS": "300"}
    env.pop("AGENTTAPE_MODE", None)
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:recording", "-p", "no:cassetter"]
    result = bounded(
        [*pytest_run, "-p", "no:cacheprovider", "-q", "-rE", "--tb=no", "test_hostile.py"],
        cwd=tmp_path,
        env=env,
        address_space=1 << 30,
    )
    assert result.peak < 640 << 20, result  # and done within BOUNDED_WAIT, or killed
    out = result.stdout
    assert "1 passed, 4 errors" in out, out
    errors = {line.split(" - ", 1)[0]: line for line in out.splitlines() if " - " in line}
    assert set(errors) == {
        f"ERROR test_hostile.py::test_refused[{n}]" for n in ("bomb", "hidden", "deep", "huge")
    }
    for name, words in {
        "bomb": ("aliases stand for more than", "alias bomb"),
        "hidden": ("aliases stand for more than", "alias bomb"),
        "deep": ("not a vcrpy cassette", "nesting depth"),
        "huge": (f"holds a YAML scalar of {SCALAR_LIMIT + 1} characters",),
    }.items():
        line = errors[f"ERROR test_hostile.py::test_refused[{name}]"]
        assert f" - {folder / f'test_refused[{name}].yaml'}: " in line, line
        assert all(word in line for word in words), line
    # Nothing of theirs was cached; the good cassette was.
    assert len(list((cache / "vcr").iterdir())) == 1


CACHED = """
import os

import httpx
import pytest


@pytest.mark.vcr
def test_answer():
    assert httpx.get("http://127.0.0.1/").content == os.environ["EXPECTED"].encode()
"""


def plant(entry: Path) -> None:
    """Puts another answer into a parse-cache entry, as someone who can write there could."""
    cached = msgpack.unpackb(entry.read_bytes(), raw=False, strict_map_key=False)
    cached[2][0]["body"]["string"] = b"planted"
    entry.write_bytes(msgpack.packb(cached, use_bin_type=True))


def test_the_parse_cache_is_read_only_from_a_folder_of_this_users_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_cached=CACHED)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    folder = pytester.path / "cassettes" / "test_cached"
    folder.mkdir(parents=True)
    (folder / "test_answer.yaml").write_text(cassette("one", body="real"))
    cache = pytester.path / "shared"
    monkeypatch.setenv("AGENTTAPE_CACHE_DIR", str(cache))
    monkeypatch.delenv("AGENTTAPE_MODE", raising=False)

    def answer(expected: str) -> None:
        monkeypatch.setenv("EXPECTED", expected)
        result = pytester.runpytest_inprocess("-p", "no:recording", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)

    answer("real")  # parsed, and cached in a folder made 0700
    private = cache / "vcr"
    assert private.stat().st_mode & 0o777 == 0o700
    (entry,) = private.iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600
    plant(entry)
    answer("planted")  # this user's own folder: the cache is what is read

    private.chmod(0o777)  # a folder others can write: whatever it holds is not read
    answer("real")
    assert msgpack.unpackb(entry.read_bytes())[2][0]["body"]["string"] == b"planted"  # nor written
    private.chmod(0o700)
    entry.chmod(0o666)  # an entry others can write: not read, and made anew
    answer("real")
    assert entry.stat().st_mode & 0o777 == 0o600
    plant(entry)
    answer("planted")
    if os.geteuid() == 0:  # a folder, or an entry, of another user's, however closed
        os.chown(private, 65534, 65534)
        answer("real")
        os.chown(private, 0, 0)
        os.chown(entry, 65534, 65534)
        answer("real")
