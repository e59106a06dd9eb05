"""Put on PYTHONPATH by ``agenttape run``: every Python process started under it (the program
and its Python subprocesses) opens the cassette before user code runs, with no code change.

It then runs the ``sitecustomize`` it shadows, so a site's own customisation still happens.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _start() -> None:
    if not os.environ.get("AGENTTAPE_RUN_CASSETTE"):
        return
    try:
        from agenttape._tools import run_command
    except ImportError as exc:
        sys.stderr.write(
            f"agenttape run: {sys.executable} cannot import agenttape ({exc}); "
            "only what this process sends through the recording proxy (HTTPS_PROXY) is "
            "recorded or replayed\n"
        )
        return
    run_command.start_in_process()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_start()
_chain()
