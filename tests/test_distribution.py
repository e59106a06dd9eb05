"""The wheel a user installs: its name (not the index's unrelated ``agenttape``), metadata,
license, and everything the package needs at run time (the CLI, the pytest plugin, the
bootstrap ``agenttape run`` puts on children's path, the style and script of
``agenttape view``, ``py.typed``)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_wheel_carries_its_name_metadata_license_and_entry_points(tmp_path: Path) -> None:
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("-w", str(tmp_path), str(ROOT)),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()

    assert metadata["Name"] == "agenttape-recorder"
    assert _normalised(metadata["Name"]) != "agenttape"
    assert metadata["License-Expression"] == "MIT"
    assert license_text.startswith("MIT License")
    urls = dict(value.split(", ", 1) for value in metadata.get_all("Project-URL"))
    assert set(urls) >= {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    classifiers = metadata.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "agenttape = agenttape._tools.cli:main" in entry_points
    assert "agenttape = agenttape._tools.pytest_plugin" in entry_points
    assert {
        "agenttape/__init__.py",
        "agenttape/py.typed",
        "agenttape/_bootstrap/sitecustomize.py",
        "agenttape/_tools/view.css",
        "agenttape/_tools/view.js",
    } <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "bench/", "examples/"))]


def test_every_install_line_names_the_distribution() -> None:
    """``pip install agenttape`` installs somebody else's project."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources = [*documents, *sorted((ROOT / "src" / "agenttape").rglob("*.py"))]
    wrong = []
    for path in sources:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pip install[^\n]*['\"\s]agenttape([\[<>=~!'\"\s]|$)", line):
                wrong.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert wrong == []


def test_every_page_installs_from_a_checkout_until_the_first_release() -> None:
    """``agenttape-recorder`` is not on PyPI yet: a page that installs it by name from the
    index fails for every reader (README's Install says so)."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documents += sorted((ROOT / "examples").rglob("*.md"))
    wrong = []
    for path in documents:
        if "node_modules" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pip install[^\n]*['\"\s]agenttape-recorder", line):
                wrong.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert wrong == []


def test_the_pythons_declared_are_the_ones_ci_runs() -> None:
    """``requires-python`` and the classifiers say what CI tests: the machine's own Python
    (3.11, README's) and those ``.ci/pythons.py`` runs the whole suite on; pre-releases aside."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    run = (ROOT / ".ci" / "run").read_text()
    suites = re.search(r"\.ci/pythons\.py((?: 3\.\d+)+) ", run)
    assert suites is not None
    tested = {"3.11", *suites.group(1).split()}
    classified = {
        line.rsplit("::", 1)[1].strip()
        for line in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", line)
    }
    assert classified == tested
    lowest = min(tested, key=lambda version: tuple(map(int, version.split("."))))
    assert project["requires-python"] == f">={lowest}"
    assert "3.11" in (ROOT / "README.md").read_text()


def test_an_install_makes_the_package_importable_and_nothing_else_of_the_checkout(
    tmp_path: Path,
) -> None:
    """A project's own ``tests`` or ``bench`` package is never shadowed by this checkout's,
    editable install or not: only ``agenttape`` is importable from outside the checkout."""
    code = (
        "import importlib.util, agenttape\n"
        "print(agenttape.__file__)\n"
        "print([n for n in ('tests', 'bench', 'examples') if importlib.util.find_spec(n)])\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert found[0].endswith("/agenttape/__init__.py")
    assert found[1] == "[]"
