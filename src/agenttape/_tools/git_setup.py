"""``agenttape init-git`` and ``agenttape merge-driver``: cassettes reviewable in git.

``init-git`` writes the ``.gitattributes`` line that names cassettes (``*.msgpack
diff=agenttape merge=agenttape``) and the repository's git config behind it: the diff driver
runs ``agenttape textconv``, so ``git diff`` and ``git log -p`` show a cassette as text; the
merge driver never combines two versions of a cassette (two recordings do not interleave):
it keeps ours and exits non-zero, so git reports the conflict and the user re-records or
takes theirs. The re-recording leftovers (``*.previous.msgpack``, ``*.new.msgpack``) are
added to ``.gitignore`` beside it.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from .._core.errors import AgentTapeError
from .._core.files import write_atomic
from .cli_usage import arg, command, operands

ATTRIBUTES = "*.msgpack diff=agenttape merge=agenttape"
IGNORED = ("*.previous.msgpack", "*.new.msgpack")


def _git(folder: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=False, timeout=30
        )
    except FileNotFoundError:
        raise AgentTapeError("git is not installed (or not on PATH)") from None
    if done.returncode != 0:
        raise AgentTapeError(f"git {' '.join(args)} failed in {folder}: {done.stderr.strip()}")
    return done.stdout.strip()


def _add_lines(path: Path, lines: tuple[str, ...]) -> bool:
    """Appends the ``lines`` that ``path`` does not hold yet; True when it changed."""
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    missing = [line for line in lines if line not in existing.splitlines()]
    if not missing:
        return False
    separator = "" if not existing or existing.endswith("\n") else "\n"
    write_atomic(path, (existing + separator + "\n".join(missing) + "\n").encode())
    return True


def command_prefix() -> str:
    """How git is to run this agenttape: this interpreter, so a virtual environment that is
    not on git's PATH (an editor's git, a GUI) still finds it."""
    return f"{shlex.quote(sys.executable)} -m agenttape"


def init_git(folder: Path) -> list[str]:
    """Configures the repository around ``folder`` and returns what was done, line by line."""
    if not folder.is_dir():
        raise AgentTapeError(f"{folder} is not a folder")
    _git(folder, "rev-parse", "--show-toplevel")
    prefix = command_prefix()
    done = []
    attributes = folder / ".gitattributes"
    if _add_lines(attributes, (ATTRIBUTES,)):
        done.append(f"wrote '{ATTRIBUTES}' to {attributes}")
    ignore = folder / ".gitignore"
    if _add_lines(ignore, IGNORED):
        done.append(f"wrote {' and '.join(IGNORED)} to {ignore}")
    settings = (
        ("diff.agenttape.textconv", f"{prefix} textconv"),
        ("merge.agenttape.name", "agenttape: a cassette is never merged; keep ours, report it"),
        ("merge.agenttape.driver", f"{prefix} merge-driver %O %A %B %P"),
    )
    for key, value in settings:
        _git(folder, "config", "--local", key, value)
        done.append(f"git config {key} {shlex.quote(value)}")
    return done


def cmd_init_git(args: argparse.Namespace, out: TextIO) -> int:
    for line in init_git(Path(args.folder)):
        out.write(line + "\n")
    out.write("git diff and git log -p now show cassettes as text (agenttape textconv)\n")
    return 0


def cmd_merge_driver(args: argparse.Namespace, out: TextIO) -> int:
    """Leaves ours (``%A``) as it is and reports the conflict: git marks the path conflicted."""
    sys.stderr.write(
        f"agenttape: cassette {args.path} was changed on both sides; kept ours. Two "
        "recordings do not merge: re-record it (pytest --agenttape-record), or take theirs "
        f"with: git checkout --theirs -- {shlex.quote(args.path)}\n"
    )
    return 1


COMMANDS = (
    command(
        "init-git",
        cmd_init_git,
        arg("folder", metavar="FOLDER", nargs="?", default=".", help="default: the current folder"),
        help="make git diff, git log -p and merges treat cassettes as text",
        description=(
            "Write '.gitattributes' (and '.gitignore' for the re-recording leftovers) in "
            "FOLDER and this repository's git config: git diff shows cassettes through "
            "agenttape textconv, and a merge of two versions of one cassette keeps ours and "
            "reports a conflict."
        ),
    ),
    command(
        "merge-driver",
        cmd_merge_driver,
        *operands("base", "ours", "theirs", "path"),
        help="git's merge driver for cassettes (written by init-git): keeps ours, exits 1",
    ),
)
