"""The cassette header: what is needed to tell, months later, how a run was made."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
import uuid
from importlib import metadata
from typing import Any

from ._version import __version__

TRACKED_DISTRIBUTIONS = (
    "httpx",
    "httpx2",
    "requests",
    "urllib3",
    "aiohttp",
    "botocore",
    "openai",
    "anthropic",
)


def new_run_id() -> str:
    return uuid.uuid4().hex


def library_versions() -> dict[str, str]:
    versions = {}
    for name in TRACKED_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_state(directory: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """Commit and dirty flag of the work tree, or None outside git (or without git)."""
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
        "created_at": _dt.datetime.now(_dt.timezone.utc),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "libraries": library_versions(),
        "git": git_state(),
        "tags": dict(tags or {}),
    }
