"""The shape of the package: a small public surface, no import cycles, no private name used
outside the module that defines it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import grimp

import agenttape

PACKAGE = Path(agenttape.__file__).parent

DOCUMENTED = {
    "AgentTapeError",
    "AgentTapeWarning",
    "Candidate",
    "Cassette",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "CassetteWriteError",
    "Failure",
    "Fault",
    "FaultNotFiredError",
    "Interaction",
    "LLMCall",
    "Mode",
    "NetworkBlockedError",
    "Recorder",
    "RecorderStats",
    "Request",
    "Response",
    "Run",
    "UnmatchedInteractionError",
    "__version__",
    "boundary",
    "fault",
    "load",
    "uninstall",
    "use_cassette",
}


def test_the_exported_names_are_exactly_the_documented_ones() -> None:
    assert set(agenttape.__all__) == DOCUMENTED
    assert all(hasattr(agenttape, name) for name in agenttape.__all__)
    assert (PACKAGE / "py.typed").is_file()


def test_use_cassette_spells_out_its_options() -> None:
    parameters = inspect.signature(agenttape.use_cassette).parameters
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    assert list(parameters)[1:] == list(inspect.signature(agenttape.Cassette).parameters)[1:]
    assert parameters["mode"].default == "none"


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if not imported.startswith("agenttape"):
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module.startswith("agenttape") and module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph("agenttape", exclude_type_checking_imports=True)
    # A package's __init__ importing its submodules is not a cycle of ideas.
    assert [c for c in cycles(graph) if not _package_and_children(c)] == []


def _package_and_children(component: list[str]) -> bool:
    return any(all(m == p or m.startswith(p + ".") for m in component) for p in component)


def private_names_used_across_modules() -> list[str]:
    """``from agenttape.x import _name`` and ``module._name`` for a module of the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (
                node.level or "agenttape" in (node.module or "")
            ):
                for alias in node.names:
                    name = alias.asname or alias.name
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(
                            f"{path.relative_to(PACKAGE)}:{node.lineno} imports {alias.name}"
                        )
                    modules.add(name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(
                    f"{path.relative_to(PACKAGE)}:{node.lineno} uses {node.value.id}.{node.attr}"
                )
    return found


def test_no_private_name_is_used_outside_its_module() -> None:
    assert private_names_used_across_modules() == []


def test_tools_compose_a_cassette_and_never_subclass_it() -> None:
    """What ``agenttape run`` needs of a cassette (a fragment to save to, a play log shared
    between processes) is handed to one as a collaborator: no module subclasses
    ``Cassette`` or ``ReplayQueue``, so their insides stay theirs to change."""
    closed = {"Cassette", "ReplayQueue"}
    subclasses = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
                if bases & closed:
                    subclasses.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert subclasses == []
