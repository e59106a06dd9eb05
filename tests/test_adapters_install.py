"""Installing adapters while other threads import the libraries they patch: no lock of
agenttape is held across an import, so no lock-order inversion with the import system."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agenttape"

# One thread imports urllib3 and is held inside that import (it holds urllib3's module lock)
# until another thread is inside install_adapters, opening a cassette, and has reached an
# import; then the first is let go. A lock of agenttape held across that import would make
# each thread wait for the other for ever.
RACE = """
    import importlib.machinery, sys, threading, traceback
    import agenttape

    with agenttape.use_cassette(sys.argv[1], mode="all"):
        pass  # the import hook is in place
    importing, go = threading.Event(), threading.Event()


    class Paused(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name != "urllib3":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                importing.set()
                go.wait(30)

            spec.loader.exec_module = exec_module
            return spec


    sys.meta_path.insert(1, Paused)  # behind agenttape's hook, which wraps what it finds
    importer = threading.Thread(target=lambda: __import__("urllib3"), daemon=True)
    importer.start()
    importing.wait(30)


    def open_cassette():
        with agenttape.use_cassette(sys.argv[1], mode="all"):
            pass


    opener = threading.Thread(target=open_cassette, daemon=True)
    opener.start()
    while opener.is_alive():
        frames = traceback.extract_stack(sys._current_frames()[opener.ident])
        names = [frame.name for frame in frames]
        if "install_adapters" in names and any("_bootstrap" in f.filename for f in frames):
            break
    go.set()
    importer.join(10)
    opener.join(10)
    if importer.is_alive() or opener.is_alive():
        print("deadlock", flush=True)
        import os
        os._exit(3)
    import urllib3
    from agenttape._adapters import ledger
    pool = urllib3.connectionpool.HTTPConnectionPool
    patched = ledger.installed(pool, "_make_request") is not None
    print("patched" if patched else "not patched", flush=True)
"""


def test_opening_a_cassette_while_another_thread_imports_a_library_never_deadlocks(
    tmp_path: Path,
) -> None:
    script = tmp_path / "race.py"
    script.write_text(textwrap.dedent(RACE))
    result = subprocess.run(
        [sys.executable, script, tmp_path / "tape.msgpack"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip() == "patched", result.stdout + result.stderr
    assert result.returncode == 0


def _imports_under_a_lock(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.With, ast.AsyncWith)):
            continue
        if not any("lock" in ast.unparse(item.context_expr).lower() for item in node.items):
            continue
        pending: list[ast.AST] = list(node.body)
        while pending:
            inner = pending.pop()
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(inner, (ast.Import, ast.ImportFrom)) or (
                isinstance(inner, ast.Call) and "import_module" in ast.unparse(inner.func)
            ):
                lines.append(inner.lineno)
            pending.extend(ast.iter_child_nodes(inner))
    return lines


def test_no_lock_is_held_across_an_import_and_adapters_patch_without_importing() -> None:
    """What the race above proves for one path, checked for every module: no ``with ...lock``
    block imports, and an adapter's ``install`` (run under the adapters' lock) imports
    nothing."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        found += [f"{path.name}:{line}" for line in _imports_under_a_lock(tree)]
        if path.parent.name == "_adapters":
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name == "install":
                    found += [
                        f"{path.name}:{inner.lineno} (install)"
                        for inner in ast.walk(node)
                        if isinstance(inner, (ast.Import, ast.ImportFrom))
                    ]
    assert found == []


# A library whose adapter cannot patch the installed version (its internals are not the ones
# the adapter knows): ``fakelib`` here, a real package on the path, and an adapter that fails
# half-way as one patching a renamed attribute does.
UNKNOWN_VERSION = """
    import socket, sys, warnings
    import agenttape
    from agenttape import _adapters

    _adapters.LIBRARIES["fakelib.client"] = _adapters.Library(
        "fake_adapter", "fakelib", "its sessions"
    )
    warnings.simplefilter("always")
    agenttape.Cassette(sys.argv[1], mode="all").save()
    with warnings.catch_warnings(record=True) as caught:
        with agenttape.use_cassette(sys.argv[1]):
            import fakelib.client  # the library's own import never breaks
            import fakelib.client as again
            assert fakelib.client.open_connection.__module__ == "fakelib.client"
            assert "fakelib.client" not in _adapters._installed
            try:
                fakelib.client.open_connection(int(sys.argv[2]))
            except agenttape.NetworkBlockedError as blocked:
                print("blocked", blocked.port == int(sys.argv[2]))
        with agenttape.use_cassette(sys.argv[1]):  # once only, however often it is met
            pass
    said = [w for w in caught if issubclass(w.category, agenttape.AgentTapeWarning)]
    print(len(said))
    print(said[0].message)
"""

FAKELIB = """
import socket

__version__ = "0.9"


def open_connection(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
"""

FAKE_ADAPTER = """
def install(module):
    module.Connection  # what this version no longer has
"""


def test_an_adapter_that_cannot_patch_leaves_the_import_working_warns_once_and_the_guard_stands(
    tmp_path: Path,
) -> None:
    (tmp_path / "fakelib").mkdir()
    (tmp_path / "fakelib" / "__init__.py").write_text("__version__ = '0.9'\n")
    (tmp_path / "fakelib" / "client.py").write_text(FAKELIB)
    (tmp_path / "fake_adapter.py").write_text(FAKE_ADAPTER)
    script = tmp_path / "unknown.py"
    script.write_text(textwrap.dedent(UNKNOWN_VERSION))
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        result = subprocess.run(
            [sys.executable, script, tmp_path / "tape.msgpack", str(listener.getsockname()[1])],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{Path.cwd()}"},
        )
    assert result.returncode == 0, result.stderr
    blocked, count, message = result.stdout.splitlines()
    assert blocked == "blocked True"
    assert count == "1"
    assert "fakelib 0.9 (fakelib.client)" in message
    assert "AttributeError" in message and "Connection" in message
    assert "its sessions" in message and "NetworkBlockedError" in message
