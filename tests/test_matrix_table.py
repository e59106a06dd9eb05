"""The versions docs/libraries.md says CI tests are the ones the matrix (.ci/matrix.py) runs,
and each is at or above the version the docs say is supported."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def matrix() -> object:
    spec = importlib.util.spec_from_file_location("ci_matrix", ROOT / ".ci" / "matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def documented() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "libraries.md").read_text()
    section = text.split("## Versions", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("library", "---"):
            rows[cells[0].split(" (")[0]] = (cells[1], cells[2])
    return rows


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_documented_versions_are_the_ones_the_matrix_runs() -> None:
    rows = documented()
    libraries = {library.name: library for library in matrix().LIBRARIES}  # type: ignore[attr-defined]
    for library in libraries.values():
        if library.runs_in:  # tested in the cells of another library, each version pinned there
            host = libraries[library.runs_in]
            for own, hosts in zip(library.versions, host.versions, strict=True):
                assert f"{library.name}=={own}" in host.companions[hosts], library.name
        supported, tested = rows[library.name]
        listed = re.findall(r"\d+\.\d+(?:\.\d+)?(?=[ ,]|$)", re.sub(r"\([^)]*\)", "", tested))
        assert listed == list(library.versions), library.name
        assert version(library.versions[0])[:2] == version(supported)[:2], library.name
        assert sorted(library.versions, key=version) == list(library.versions)
