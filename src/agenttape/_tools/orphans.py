"""``pytest --agenttape-orphans``: cassette files no collected test uses, and recorded
interactions no test played; ``--agenttape-orphans=delete`` removes the files.

Files are looked for in the suite's cassette folders: ``cassettes/`` beside every collected
test file, and the folder of every cassette a marker names. A file is an orphan when no
collected test uses it and this run could know that: its test module is gone, or was
collected whole (a run of some files only never condemns the cassettes of the others). What
re-recordings and partial replays leave beside a cassette (``.previous``, ``.new``,
``.derived``) and what the pytest-recording drop-in records beside a YAML cassette are not
orphans. Deleting removes each file (an unlink: a file git tracks is never rewritten in
place) and the folders left empty; interactions no test played are only reported (dropping
them is a re-recording).

Under xdist every worker collects the whole suite and runs some of it: each sends what it
found with its output, and the controller puts the answers together, decides and deletes.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .._core.text import counted

CHOICES = ("report", "delete")
LEFTOVERS = (".previous.msgpack", ".new.msgpack", ".derived.msgpack")
_OUTPUT = "agenttape_orphans"


def add_option(group: Any) -> None:
    group.addoption(
        "--agenttape-orphans",
        nargs="?",
        const="report",
        default=None,
        choices=CHOICES,
        help="list cassette files no collected test uses and interactions no test played; "
        "=delete also removes those files",
    )


@dataclass(slots=True)
class Found:
    """What one process saw: the cassettes its collected tests use, the files in their
    folders, and per cassette the positions each test that replayed it left unplayed."""

    used: set[str] = field(default_factory=set)
    candidates: set[str] = field(default_factory=set)
    unplayed: dict[str, list[list[int]]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    def as_output(self) -> dict[str, Any]:
        """Plain values, to travel from an xdist worker."""
        return {
            "used": sorted(self.used),
            "candidates": sorted(self.candidates),
            "unplayed": self.unplayed,
            "sizes": self.sizes,
        }

    def merge(self, output: dict[str, Any]) -> None:
        self.used.update(output["used"])
        self.candidates.update(output["candidates"])
        for path, runs in output["unplayed"].items():
            self.unplayed.setdefault(path, []).extend(runs)
        self.sizes.update(output["sizes"])


def _module_files(folder: Path) -> set[Path]:
    return {
        p
        for p in folder.iterdir()
        if p.suffix == ".py" and (p.name.startswith("test") or p.stem.endswith("_test"))
    }


def _candidates(items: list[pytest.Item], used: set[Path]) -> set[str]:
    """Files in the suite's cassette folders that this run can judge (see the module note)."""
    collected = {item.path for item in items}
    roots = {item.path.parent / "cassettes" for item in items}
    roots |= {path.parent for path in used}
    found: set[str] = set()
    for root in roots:
        if not root.is_dir():
            continue
        tests = root.parent
        whole = _module_files(tests) <= collected if tests.is_dir() else False
        for path in root.rglob("*.msgpack"):
            if path.name.endswith(LEFTOVERS) or any(
                path.with_suffix(suffix).exists() for suffix in (".yaml", ".yml", ".json")
            ):
                continue
            module = tests / f"{path.parent.name}.py"
            if path.parent.parent == root:
                judged = not module.exists() or module in collected
            else:
                judged = whole
            if judged:
                found.add(str(path))
    return found


class Orphans:
    """The plugin, registered when ``--agenttape-orphans`` is given."""

    def __init__(self, config: pytest.Config, cassette_of: Any, played_of: Any) -> None:
        self.config = config
        self.action: str = config.getoption("agenttape_orphans")
        self.cassette_of = cassette_of
        self.played_of = played_of
        self.found = Found()
        self.orphans: list[str] = []
        self.deleted: list[str] = []

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Any:
        # Before -k, -m and the like deselect: a deselected test still uses its cassette.
        every = list(items)
        used = {path for path in map(self.cassette_of, every) if path is not None}
        self.found.used |= {str(path) for path in used}
        self.found.candidates |= _candidates(every, used)
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Any:
        yield
        played = self.played_of(item)
        if played is not None:
            path, counts = played
            self.found.sizes[str(path)] = len(counts)
            unplayed = [index for index, count in enumerate(counts) if not count]
            self.found.unplayed.setdefault(str(path), []).append(unplayed)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[_OUTPUT] = self.found.as_output()
            return
        self.orphans = sorted(self.found.candidates - self.found.used)
        if self.action == "delete":
            self._delete()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}).get(_OUTPUT)
        if output is not None:
            self.found.merge(output)

    def _delete(self) -> None:
        for name in self.orphans:
            path = Path(name)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                self.deleted.append(name)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when it is left empty

    def unplayed(self) -> dict[str, list[int]]:
        """Per cassette, the positions that no test replaying it played."""
        left: dict[str, list[int]] = {}
        for path, runs in sorted(self.found.unplayed.items()):
            common = set.intersection(*(set(run) for run in runs))
            if common:
                left[path] = sorted(common)
        return left

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "agenttape: orphans")
        here = Path(str(self.config.rootpath))

        def shown(name: str) -> str:
            with contextlib.suppress(ValueError):
                return os.path.relpath(name, here)
            return name

        if self.orphans:
            verb = "deleted" if self.action == "delete" else "no collected test uses"
            write(f"{counted(len(self.orphans), 'cassette file')}: {verb}")
            write("".join(f"  {shown(name)}\n" for name in self.orphans).rstrip("\n"))
        else:
            write("no cassette file is an orphan")
        unplayed = self.unplayed()
        if unplayed:
            write(f"interactions no test played, in {counted(len(unplayed), 'cassette')}:")
            for path, positions in unplayed.items():
                numbers = ", ".join(f"#{n}" for n in positions)
                write(f"  {shown(path)}: {numbers} of {self.found.sizes.get(path, '?')}")
            write("  (re-record those tests to drop them: pytest --agenttape-record ...)")
        if self.orphans and self.action != "delete":
            write("--agenttape-orphans=delete removes the files")
