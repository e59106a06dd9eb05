"""Put on PYTHONPATH for Python child processes, so each starts under agenttape before any
user code runs, with no code change: under ``agenttape run`` it opens the run's cassette;
while a cassette that blocks the network is active in the parent, the child gets the same
network guard.

It then runs the ``sitecustomize`` it shadows, so a site's own customisation still happens.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _start() -> None:
    if os.environ.get("AGENTTAPE_RUN_CASSETTE"):
        who, what = (
            "agenttape run",
            (
                "only what this process sends through the recording proxy (HTTPS_PROXY) is "
                "recorded or replayed"
            ),
        )
    elif os.environ.get("AGENTTAPE_GUARD"):
        who, what = "agenttape", "its network is not guarded"
    else:
        return
    try:
        from agenttape._adapters import children
        from agenttape._tools import run_process
    except ImportError as exc:
        sys.stderr.write(f"{who}: {sys.executable} cannot import agenttape ({exc}); {what}\n")
        return
    if os.environ.get("AGENTTAPE_RUN_CASSETTE"):
        run_process.start_in_process()
    else:
        children.inherit()


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
