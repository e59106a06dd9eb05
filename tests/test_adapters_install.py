"""Installing adapters while other threads import the libraries they patch: no lock of
agenttape is held across an import, so no lock-order inversion with the import system."""

from __future__ import annotations

import ast
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
    patched = "agenttape" in urllib3.connectionpool.HTTPConnectionPool._make_request.__module__
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
