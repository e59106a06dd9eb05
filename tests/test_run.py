"""``agenttape run``: a program that never imports agenttape, and its Python subprocesses,
recorded and replayed with no change to its code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import agenttape
from tests.cli_support import AGENTTAPE, assert_one_line_error, cli, signals_as_at_a_terminal
from tests.servers import Seen, Server, json_reply

PROGRAM = """
    import json, os, subprocess, sys
    import httpx

    base = os.environ["API"]
    role = sys.argv[1] if len(sys.argv) > 1 else "parent"
    if role == "parent":
        print(json.dumps(httpx.get(base + "/plan").json()))
        # three workers at once, each its own Python process
        workers = [
            subprocess.Popen([sys.executable, __file__, f"worker{n}"], stdout=subprocess.PIPE, text=True)
            for n in range(3)
        ]
        for worker in workers:
            print(worker.communicate()[0].strip())
    else:
        with httpx.Client() as client:
            for step in range(2):
                print(json.dumps(client.post(base + "/work", json={"who": role, "step": step}).json()))
"""


def _app(seen: Seen) -> object:
    if seen.path == "/plan":
        return json_reply({"workers": 3})
    return json_reply({"done": seen.json() if seen.body else seen.path})


def _program(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(PROGRAM))
    return path


def test_run_records_a_program_and_its_subprocesses_then_replays_offline(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(_app)
    program = _program(tmp_path)
    cassette = tmp_path / "cassettes" / "agent.msgpack"
    env = {"API": server.url}
    recorded = cli("run", "--mode", "once", "--", "python", program, cwd=tmp_path, env=env)
    assert recorded.returncode == 0, recorded.stderr
    assert "recorded 7 interactions from 4 processes" in recorded.stderr
    assert len(server.seen) == 7
    server.stop()

    tape = agenttape.load(cassette)  # the default name: cassettes/<script>.msgpack
    assert len(tape.interactions) == 7
    bodies = sorted(json.loads(i.request.body)["who"] for i in tape.interactions[1:])
    assert bodies == ["worker0", "worker0", "worker1", "worker1", "worker2", "worker2"]
    assert [p.name for p in cassette.parent.iterdir()] == ["agent.msgpack"]  # no fragments left

    replayed = cli("run", "--", "python", program, cwd=tmp_path, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert '{"done": {"who": "worker2", "step": 1}}' in replayed.stdout
    assert agenttape.load(cassette).interactions == tape.interactions  # replay never writes


def test_run_new_episodes_adds_only_the_new_requests(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(_app)
    script = tmp_path / "one.py"
    script.write_text(
        "import httpx, os, sys\n"
        "for path in sys.argv[1:]:\n"
        "    print(httpx.get(os.environ['API'] + path).status_code)\n"
    )
    cassette = tmp_path / "tape.msgpack"
    env = {"API": server.url}
    args = ("run", "--cassette", cassette)
    assert (
        cli(*args, "--mode", "all", "--", "python", script, "/a", cwd=tmp_path, env=env).returncode
        == 0
    )
    more = cli(
        *args, "--mode", "new_episodes", "--", "python", script, "/a", "/b", cwd=tmp_path, env=env
    )
    assert more.returncode == 0, more.stderr
    assert "added 1 interaction" in more.stderr
    assert [s.path for s in server.seen] == ["/a", "/b"]  # /a was replayed the second time
    urls = [i.request.url.rsplit("/", 1)[1] for i in agenttape.load(cassette).interactions]
    assert urls == ["a", "b"]


def test_run_replay_miss_fails_the_program_not_the_cassette(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(_app)
    script = tmp_path / "ask.py"
    script.write_text("import httpx, os, sys\nhttpx.get(os.environ['API'] + sys.argv[1])\n")
    cassette = tmp_path / "tape.msgpack"
    env = {"API": server.url}
    cli("run", "--cassette", cassette, "--mode", "all", "--", "python", script, "/a", env=env)
    server.stop()
    before = cassette.read_bytes()
    missed = cli("run", "--cassette", cassette, "--", "python", script, "/other", env=env)
    assert missed.returncode == 1
    assert (
        "UnmatchedInteractionError" in missed.stderr and "url.path: expected '/a'" in missed.stderr
    )
    once = cli(
        "run", "--cassette", cassette, "--mode", "once", "--", "python", script, "/b", env=env
    )
    assert "(mode 'once', through agenttape run, 1 interaction)" in once.stderr
    assert "To re-record: agenttape run --mode all -- COMMAND" in once.stderr
    assert cassette.read_bytes() == before


def test_run_refuses_missing_and_corrupt_cassettes(tmp_path: Path) -> None:
    script = tmp_path / "noop.py"
    script.write_text("print('ran')\n")
    missing = tmp_path / "missing.msgpack"
    result = cli("run", "--cassette", missing, "--", "python", script)
    assert_one_line_error(result, str(missing), "does not exist")
    assert "ran" not in result.stdout
    corrupt = tmp_path / "corrupt.msgpack"
    corrupt.write_bytes(b"\x82\xa9agenttape")
    for mode in ("none", "all", "new_episodes"):
        result = cli("run", "--cassette", corrupt, "--mode", mode, "--", "python", script)
        assert_one_line_error(result, str(corrupt))
    assert corrupt.read_bytes() == b"\x82\xa9agenttape"
    assert_one_line_error(
        cli("run", "--cassette", missing, "--mode", "all", "--", "no-such-program-xyz"),
        "command not found",
    )


def test_run_passes_the_exit_status_through(tmp_path: Path) -> None:
    script = tmp_path / "exit.py"
    script.write_text("import sys\nsys.exit(7)\n")
    cassette = tmp_path / "tape.msgpack"
    result = cli("run", "--cassette", cassette, "--mode", "all", "--", "python", script)
    assert result.returncode == 7
    # It made no request: no empty cassette is left to block the next recording, and the run
    # says so once (not again from each process in a warning of its own).
    assert result.stderr.splitlines() == [
        "agenttape run: nothing was recorded: the command made no HTTP request (did it fail "
        f"before sending one, for a missing API key say?); {cassette} was not written, so the "
        "next run records again"
    ]
    assert not cassette.exists()


POOL = """
    import multiprocessing, os, sys
    import httpx


    def work(name):
        print(name, httpx.get(os.environ["API"] + "/" + name).json()["done"], flush=True)


    if __name__ == "__main__":
        work("main")
        for method in ("fork", "spawn", "forkserver"):
            process = multiprocessing.get_context(method).Process(target=work, args=(method,))
            process.start()
            process.join()
"""


def test_run_covers_multiprocessing_children(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(_app)
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent(POOL))
    cassette = tmp_path / "pool.msgpack"
    env = {"API": server.url}
    recorded = cli("run", "--cassette", cassette, "--mode", "all", "--", "python", script, env=env)
    assert recorded.returncode == 0, recorded.stderr
    assert sorted(s.path for s in server.seen) == ["/fork", "/forkserver", "/main", "/spawn"]
    server.stop()
    paths = sorted(i.request.url.rsplit("/", 1)[1] for i in agenttape.load(cassette).interactions)
    assert paths == ["fork", "forkserver", "main", "spawn"]
    replayed = cli("run", "--cassette", cassette, "--", "python", script, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert sorted(replayed.stdout.splitlines()) == sorted(recorded.stdout.splitlines())


def test_a_subprocess_that_cannot_open_the_cassette_stops_cleanly(tmp_path: Path) -> None:
    """The cassette is damaged while the program runs: the next Python process it starts
    says so in one line and stops before running unprotected."""
    cassette = tmp_path / "tape.msgpack"
    agenttape.Cassette(cassette, mode="all").save()
    script = tmp_path / "damage.py"
    script.write_text(
        "import subprocess, sys\n"
        f"open({str(cassette)!r}, 'wb').write(b'garbage')\n"
        "child = subprocess.run([sys.executable, '-c', 'print(\"child ran\")'], capture_output=True, text=True)\n"
        "print(child.returncode, child.stdout.strip(), child.stderr.strip())\n"
    )
    result = cli("run", "--cassette", cassette, "--", "python", script)
    assert result.returncode == 0, result.stderr
    code, _, message = result.stdout.strip().partition(" ")
    assert code == "2" and "child ran" not in message
    assert message.strip().startswith(
        f"agenttape run: error: {cassette}: not an agenttape cassette"
    )
    assert "Traceback" not in message and "Fatal" not in message


def test_processes_share_what_has_been_played(tmp_path: Path, serve: Callable[..., Server]) -> None:
    """The same request made by the program and then by its subprocess gets, on replay, the
    first recorded response and then the second, as it did live."""
    counter = iter(range(1, 100))
    server = serve(lambda seen: json_reply({"n": next(counter)}))
    script = tmp_path / "count.py"
    script.write_text(
        "import httpx, os, subprocess, sys\n"
        "print(httpx.get(os.environ['API'] + '/next').json()['n'], flush=True)\n"
        "if len(sys.argv) == 1:\n"
        "    subprocess.run([sys.executable, __file__, 'child'], check=True)\n"
        "    print(httpx.get(os.environ['API'] + '/next').json()['n'], flush=True)\n"
    )
    cassette = tmp_path / "count.msgpack"
    env = {"API": server.url}
    recorded = cli("run", "--cassette", cassette, "--mode", "all", "--", "python", script, env=env)
    assert recorded.stdout.split() == ["1", "2", "3"], recorded.stderr
    server.stop()
    replayed = cli("run", "--cassette", cassette, "--", "python", script, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.split() == ["1", "2", "3"]


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.SITE_HOOK = 'ran'\n")
    script = tmp_path / "check.py"
    script.write_text(
        "import builtins, sys\nprint(getattr(builtins, 'SITE_HOOK', 'missing'), 'agenttape' in sys.modules)\n"
    )
    cassette = tmp_path / "tape.msgpack"
    env = {"PYTHONPATH": str(site)}
    result = cli("run", "--cassette", cassette, "--mode", "all", "--", "python", script, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ran", "True"]


STEPS = """
    import os, sys, time
    import httpx

    for i in range(20):
        print(httpx.get(os.environ["API"] + "/step", params={"i": i}).json(), flush=True)
        if i == 2 and sys.argv[1:] == ["wait"]:
            print("ready", flush=True)
            time.sleep(60)  # the signal comes here
"""


def run_until_ready(
    args: list[str], cwd: Path, api: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """Starts ``agenttape ARGS`` as a terminal would and reads the command's first four lines
    (its last says it is ready for the signal)."""
    with signals_as_at_a_terminal():
        run = subprocess.Popen(
            [str(AGENTTAPE), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env={**os.environ, "API": api},
        )
    assert run.stdout is not None
    return run, [run.stdout.readline() for _ in range(4)]


def stderr_once_ended(run: subprocess.Popen[str]) -> str:
    """What ``agenttape run`` wrote to stderr once it and its command ended; if they have not
    a minute after the signal, which of them is still running."""
    try:
        return run.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        if run.poll() is None:
            state = "is still running"
        else:
            state = f"ended ({run.returncode}), yet its command still holds the output open"
        run.kill()
        pytest.fail(f"a minute after the signal agenttape run {state}")


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_run_saves_the_recording_marked_interrupted(
    sent: signal.Signals, tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({"step": dict(seen.query)["i"]}))
    script = tmp_path / "steps.py"
    script.write_text(textwrap.dedent(STEPS))
    cassette = tmp_path / "cassettes" / "steps.msgpack"
    run, lines = run_until_ready(
        ["run", "--mode", "once", "--", "python", str(script), "wait"], tmp_path, server.url
    )
    assert lines[-1] == "ready\n", lines
    run.send_signal(sent)  # to agenttape run alone, as kill or a supervisor sends it
    err = stderr_once_ended(run)
    assert run.returncode == 128 + sent  # the command's own status for the signal
    assert len(server.seen) == 3
    server.stop()

    name = signal.Signals(sent).name
    assert f"the run was stopped by {name}: {cassette} is marked interrupted" in err
    tape = agenttape.load(cassette)
    assert len(tape.interactions) == 3
    assert tape.metadata["interrupted"] == {"after": 3, "by": name}
    shown = cli("show", cassette)
    assert shown.stdout.splitlines()[1] == (
        f"RECORDING CUT SHORT: interrupted by {name} after 3 interactions; what the code did "
        "after that was never recorded. Record it again to the end."
    )
    replayed = cli("run", "--", "python", script, cwd=tmp_path, env={"API": server.url})
    assert replayed.returncode == 1
    assert replayed.stdout.splitlines() == ["{'step': '0'}", "{'step': '1'}", "{'step': '2'}"]
    assert f"No recorded interaction matches GET {server.url}/step?i=3" in replayed.stderr
    assert (
        f"This cassette's recording was cut short (interrupted by {name} after 3 "
        "interactions): what the code did after that was never recorded." in replayed.stderr
    )


THREAD_MASKS = """
    import os
    from pathlib import Path

    run = os.getppid()
    for task in sorted(Path(f"/proc/{run}/task").iterdir(), key=lambda task: int(task.name)):
        status = dict(
            line.split(":\\t", 1) for line in (task / "status").read_text().splitlines()
        )
        blocked = int(status["SigBlk"], 16)
        main = "main" if int(task.name) == run else "other"
        print(main, all(blocked >> (number - 1) & 1 for number in (2, 15)))
"""


def test_only_the_main_thread_of_run_takes_its_signals(tmp_path: Path) -> None:
    # A signal the kernel gave one of the proxy's threads would wait for the main thread,
    # blocked in its wait for the command, to run Python code: the command would not stop.
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs /proc")
    script = tmp_path / "masks.py"
    script.write_text(textwrap.dedent(THREAD_MASKS))
    cassette = tmp_path / "tape.msgpack"
    result = cli("run", "--cassette", cassette, "--mode", "all", "--", "python", script)
    assert result.returncode == 0, result.stderr
    threads = result.stdout.splitlines()
    assert threads[0] == "main False"  # SIGINT and SIGTERM reach the main thread
    assert len(threads) > 1  # the recording proxy's
    assert set(threads[1:]) == {"other True"}


def test_sigterm_to_run_keeps_what_a_non_python_command_sent_through_the_proxy(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    server = serve(lambda seen: json_reply({"step": dict(seen.query)["i"]}))
    script = tmp_path / "steps.sh"
    script.write_text(
        'for i in 0 1 2; do curl -s "$API/step?i=$i"; echo; done\necho ready\nexec sleep 60\n'
    )
    cassette = tmp_path / "steps.msgpack"
    command = ["run", "--cassette", str(cassette), "--mode", "once"]
    run, lines = run_until_ready([*command, "--", "bash", str(script)], tmp_path, server.url)
    assert lines == ['{"step": "0"}\n', '{"step": "1"}\n', '{"step": "2"}\n', "ready\n"]
    run.send_signal(signal.SIGTERM)
    err = stderr_once_ended(run)
    assert run.returncode == 128 + signal.SIGTERM
    assert f"the run was stopped by SIGTERM: {cassette} is marked interrupted" in err
    tape = agenttape.load(cassette)
    assert [i.request.url for i in tape.interactions] == [
        f"{server.url}/step?i={i}" for i in range(3)
    ]
    assert tape.metadata["interrupted"] == {"after": 3, "by": "SIGTERM"}


def test_a_python_program_s_native_clients_are_recorded_once_not_also_by_the_proxy(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """libcurl reads the run's recording proxy from the environment; a Python process that
    records its own requests in-process sends curl_cffi's and pycurl's past it, as httpx's."""
    pytest.importorskip("curl_cffi")
    pytest.importorskip("pycurl")
    server = serve(lambda seen: json_reply({"path": seen.path}))
    program = tmp_path / "native.py"
    program.write_text(
        textwrap.dedent(
            """
            import io, os
            import curl_cffi.requests, httpx, pycurl

            api = os.environ["API"]
            print(curl_cffi.requests.get(api + "/curl_cffi").text)
            handle, sink = pycurl.Curl(), io.BytesIO()
            handle.setopt(pycurl.URL, api + "/pycurl")
            handle.setopt(pycurl.WRITEDATA, sink)
            handle.perform()
            print(sink.getvalue().decode())
            print(httpx.get(api + "/httpx").text)
            """
        )
    )
    cassette = tmp_path / "native.msgpack"
    command = ["run", "--cassette", str(cassette), "--mode", "once", "--", "python", program]
    recorded = cli(*command, cwd=tmp_path, env={"API": server.url})
    assert recorded.returncode == 0, recorded.stderr
    assert sorted(seen.path for seen in server.seen) == ["/curl_cffi", "/httpx", "/pycurl"]
    tape = agenttape.load(cassette)
    assert sorted(i.request.url for i in tape.interactions) == [
        f"{server.url}/{name}" for name in ("curl_cffi", "httpx", "pycurl")
    ]
