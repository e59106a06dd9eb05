"""The cassette header: what is needed to tell, months later, how a run was made."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
import sys
import uuid
from importlib import metadata
from typing import Any

from .._version import __version__
from .secrets import scrub_tags

TRACKED_DISTRIBUTIONS = (
    "httpx",
    "httpx2",
    "requests",
    "urllib3",
    "aiohttp",
    "botocore",
    "openai",
    "anthropic",
    "grpcio",
)


def new_run_id() -> str:
    return uuid.uuid4().hex


def library_versions() -> dict[str, str]:
    return dict(_library_versions())


@functools.cache
def _library_versions() -> dict[str, str]:
    # Read once per process: package metadata lookups cost milliseconds per cassette.
    versions = {}
    for name in TRACKED_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_state(directory: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """Commit and dirty flag of the work tree, or None outside git (or without git).

    Asked once per process and directory: modules already imported do not change when their
    files do, so the first reading names the code that runs; and two git processes per
    cassette would cost a test suite, or a service keeping one cassette per run, more than
    the recording itself."""
    state = _git_state(os.path.abspath(directory if directory is not None else os.curdir))
    return dict(state) if state is not None else None


@functools.cache
def _git_state(directory: str) -> dict[str, Any] | None:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def new_header(tags: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    return {
        "agenttape_version": __version__,
        "run_id": run_id or new_run_id(),
        "created_at": _dt.datetime.now(_dt.UTC),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "libraries": library_versions(),
        "git": git_state(),
        "tags": scrub_tags(dict(tags or {})),
    }
