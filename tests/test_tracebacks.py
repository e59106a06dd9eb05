"""What a newcomer's terminal shows when a script misses the cassette, or meets a failure
replayed from it: their own code, the library they called, and the message; none of
agenttape's own frames."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

import agenttape
from tests.cli_support import cli
from tests.servers import Server, json_reply, refused_port

pytest_plugins = ["pytester"]

FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in ', re.MULTILINE)

SCRIPT = """
    import sys
    import requests
    import agenttape

    def fetch_weather(city):
        return requests.get(sys.argv[2] + "/weather", params={"city": city}, timeout=5).json()

    with agenttape.use_cassette(sys.argv[1]):
        print(fetch_weather("Oslo"))
        print(fetch_weather("Lima"))
"""


def _frames(printed: str) -> list[str]:
    return [match["file"] for match in FRAME.finditer(printed)]


def _own(files: list[str]) -> list[str]:
    package = str(Path(agenttape.__file__).parent)
    return [file for file in files if file.startswith(package)]


def _record(path: Path, url: str, cities: list[str]) -> None:
    with agenttape.use_cassette(path, mode="once"):
        for city in cities:
            requests.get(f"{url}/weather", params={"city": city}, timeout=5)


def _run(script: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=script.parent,
    )


def test_a_miss_in_a_script_prints_the_users_frames_and_the_message(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({"city": dict(seen.query)["city"], "deg": 4}))
    cassette = tmp_path / "cassettes" / "weather.msgpack"
    _record(cassette, server.url, ["Oslo"])
    server.stop()
    script = tmp_path / "weather.py"
    script.write_text(textwrap.dedent(SCRIPT))

    done = _run(script, cassette, server.url)
    assert done.returncode == 1
    assert done.stdout == "{'city': 'Oslo', 'deg': 4}\n"
    printed = done.stderr
    files = _frames(printed)
    assert _own(files) == [], printed
    assert files[:2] == [str(script), str(script)]  # the with block, then fetch_weather
    assert any("/requests/" in file for file in files)  # the library the script called
    assert printed.startswith("Traceback (most recent call last):\n")
    miss = f"No recorded interaction matches GET {server.url}/weather?city=Lima\n"
    assert f"agenttape.UnmatchedInteractionError: {miss}" in printed
    assert f"cassette: {cassette} (mode 'none', 1 interaction)" in printed
    # what is left: the user's two frames, requests' and urllib3's, then the message
    assert len(printed.splitlines()) < 45


def test_a_miss_under_agenttape_run_prints_no_agenttape_frame(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({"city": dict(seen.query)["city"]}))
    script = tmp_path / "plain.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import requests
            for city in sys.argv[1:]:
                print(requests.get(URL + "/weather", params={"city": city}, timeout=5).json())
            """
        ).replace("URL", repr(server.url))
    )
    cassette = tmp_path / "cassettes" / "plain.msgpack"
    recorded = cli("run", "--mode", "once", "--", "python", script, "Oslo", cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    server.stop()
    assert len(agenttape.load(cassette).interactions) == 1

    missed = cli("run", "--", "python", script, "Oslo", "Lima", cwd=tmp_path)
    assert missed.returncode == 1
    printed = missed.stderr
    assert _own(_frames(printed)) == [], printed
    assert str(script) in _frames(printed)
    assert "agenttape.UnmatchedInteractionError: No recorded interaction matches GET" in printed


def test_a_replayed_failure_prints_no_agenttape_frame(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather"
    cassette = tmp_path / "refused.msgpack"
    with (
        agenttape.use_cassette(cassette, mode="once"),
        contextlib.suppress(requests.ConnectionError),
    ):
        requests.get(url, timeout=5)
    script = tmp_path / "refused.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import requests
            import agenttape

            with agenttape.use_cassette(sys.argv[1]):
                requests.get(sys.argv[2], timeout=5)
            """
        )
    )
    done = _run(script, cassette, url)
    assert done.returncode == 1
    printed = done.stderr
    assert _own(_frames(printed)) == [], printed
    assert printed.count(f"agenttape: replayed from cassette {cassette}, interaction 0") == 1
    # the exception the caller catches ends the traceback, its note printed under it
    lines = printed.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("requests.exceptions."))
    assert lines[last].startswith("requests.exceptions.ConnectionError")
    assert lines[last + 1].startswith("agenttape: replayed from cassette")


def test_other_exceptions_keep_every_frame(tmp_path: Path) -> None:
    """A bug of agenttape's own must stay traceable: only its errors are trimmed."""
    cassette = tmp_path / "empty.msgpack"
    script = tmp_path / "bug.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import agenttape
            from agenttape._core import tracebacks

            with agenttape.use_cassette(sys.argv[1], mode="all"):
                tracebacks.chain(42)  # fails inside agenttape
            """
        )
    )
    done = _run(script, cassette)
    assert done.returncode == 1
    assert _own(_frames(done.stderr)), done.stderr


PASSING_THROUGH = """
    import asyncio

    import aiohttp
    import httpx
    import requests

    import agenttape
    from agenttape._core import tracebacks


    def test_a_cassette_installs_the_adapters(tmp_path):
        with agenttape.use_cassette(tmp_path / "empty.msgpack", mode="all"):
            pass


    def get_with_aiohttp():
        async def get():
            async with aiohttp.ClientSession() as session:
                await session.get("URL")

        asyncio.run(get())


    def test_requests():
        requests.get("URL", timeout=5)


    def test_httpx():
        httpx.get("URL", timeout=5)


    def test_aiohttp():
        get_with_aiohttp()


    def test_recording_requests(tmp_path):
        with agenttape.use_cassette(tmp_path / "requests.msgpack", mode="all"):
            requests.get("URL", timeout=5)


    def test_recording_httpx(tmp_path):
        with agenttape.use_cassette(tmp_path / "httpx.msgpack", mode="all"):
            httpx.get("URL", timeout=5)


    def test_recording_aiohttp(tmp_path):
        with agenttape.use_cassette(tmp_path / "aiohttp.msgpack", mode="all"):
            get_with_aiohttp()


    def test_a_bug_of_agenttapes():
        tracebacks.chain(42)  # fails inside agenttape
"""


def _reports(printed: str) -> dict[str, str]:
    """Each failed test's section of a pytest report, by the test's name."""
    sections = re.split(r"^_{3,} (\w+) _{3,}$", printed, flags=re.MULTILINE)
    return dict(zip(sections[1::2], sections[2::2], strict=True))


def test_a_failure_that_passes_through_shows_no_agenttape_frame_in_pytests_report(
    pytester: pytest.Pytester,
) -> None:
    """The adapters a cassette installed stay; a later test whose library call fails reads
    as it would without agenttape, and so does a live failure met while recording. A bug of
    agenttape's own keeps its frames."""
    url = f"http://127.0.0.1:{refused_port()}/"
    pytester.makepyfile(test_live=textwrap.dedent(PASSING_THROUGH).replace("URL", url))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tb=long")
    result.assert_outcomes(passed=1, failed=7)
    reports = _reports(result.stdout.str())
    package = str(Path(agenttape.__file__).parent)
    for library, place, error in (
        ("requests", "requests/sessions.py", "requests.exceptions.ConnectionError"),
        ("httpx", "httpcore/_sync", "httpx.ConnectError"),
        ("aiohttp", "aiohttp/connector.py", "aiohttp.client_exceptions.ClientConnectorError"),
    ):
        for report in (reports[f"test_{library}"], reports[f"test_recording_{library}"]):
            assert package not in report, report
            assert place in report and error in report, report
    assert f"{package}/_core/tracebacks.py" in reports["test_a_bug_of_agenttapes"]
