"""``agenttape doctor``: what agenttape patches in this process, and what sits beside it.

It lists every patch in place (library, version, attribute, technique, whether it can be
undone) from the ledger, what the adapters would patch when a cassette opens, the adapters
that stay off and why, HTTP libraries imported that no adapter intercepts, and the wrappers
other tools put on the same libraries (OpenTelemetry, Sentry, Logfire, respx, ddtrace…),
walking each wrapper chain down to the library's own function.

It reports on the process it runs in and imports nothing of its own accord (importing every
adapted library and SDK took seconds): the libraries not imported are listed by their
installed version, read from their metadata. ``--import MODULE`` imports the module that
sets up your instrumentation (or a library) first, so what it patches and wraps is seen;
``--install`` installs the adapters, as a cassette would, to show them in place.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import json
import re
import sys
import types
import warnings
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any, TextIO

from .._adapters import (
    LIBRARIES,
    children,
    declared,
    hooked,
    install_adapters,
    ledger,
    library_of,
    native_guard,
    network_guard,
    state,
    version_of,
)
from .._production import threads
from .._version import __version__
from .cli_usage import JSON, arg, command, flag

KNOWN_WRAPPERS = {
    "opentelemetry": "OpenTelemetry",
    "sentry_sdk": "Sentry",
    "logfire": "Logfire",
    "respx": "respx",
    "ddtrace": "ddtrace",
    "pytest_httpx": "pytest-httpx",
    "vcr": "vcrpy",
    "newrelic": "New Relic",
    "elasticapm": "Elastic APM",
    "agenttape": "agenttape",
}
"""Top-level package -> the name a wrapper of that package is reported under."""

UNADAPTED = {"treq": "treq", **native_guard.NATIVE}
"""HTTP clients that may have no adapter of their own (library module -> distribution): one
is named when it is imported and no adapter is declared for its package."""

_NOT_WRAPPERS = frozenset({*sys.stdlib_module_names, "typing_extensions"})
"""Packages whose decorators (``contextmanager``, ``deprecated``) are part of the code they
decorate, not a wrapper put on it afterwards."""

THREADS = ("threading", "concurrent.futures.thread")
"""Modules the ledger patches while a Recorder is open, beside the adapted libraries."""


@dataclass(frozen=True, slots=True)
class PatchRow:
    library: str
    version: str
    attribute: str
    technique: str
    reversible: str
    state: str


@dataclass(frozen=True, slots=True)
class WrapperRow:
    library: str
    attribute: str
    by: str
    chain: list[str]
    over_agenttape: bool


@dataclass(frozen=True, slots=True)
class Report:
    agenttape: str
    python: str
    patched: list[PatchRow]
    would_patch: list[PatchRow]
    off: dict[str, str]
    not_intercepted: dict[str, str]
    wrappers: list[WrapperRow]
    not_imported: dict[str, str]


def _version(library: str) -> str:
    return version_of(library_of(library).distribution, library)


def _reversible(entry: ledger.Entry) -> str:
    if entry.state == "installed":
        return "yes"
    if entry.state == "inert":
        return "left in place under another wrapper, passing through"
    return "left in place under another wrapper"


def patch_rows(library: str, patches: list[ledger.Patch], state: str) -> list[PatchRow]:
    """One row per attribute (a ``__code__`` swap's several writes count once)."""
    version = _version(library)
    rows: dict[tuple[str, str], PatchRow] = {}
    for patch in patches:
        attribute = _attribute(patch)
        rows.setdefault(
            (attribute, patch.technique),
            PatchRow(library, version, attribute, patch.technique, "yes", state),
        )
    return list(rows.values())


def _attribute(patch: ledger.Patch) -> str:
    """Where ``patch`` writes; the writes of a ``__code__`` swap are named by the function."""
    if patch.technique == "__code__ swap" and isinstance(patch.target, types.FunctionType):
        return f"{patch.target.__module__}.{patch.target.__qualname__}.__code__"
    return ledger.where(patch)


def report(*, imports: tuple[str, ...] = (), install: bool = False) -> Report:
    """What is patched now, and what would be: nothing is patched unless ``install``."""
    for name in imports:
        importlib.import_module(name)
    if install:
        install_adapters()
    installed, off = state()
    patched = _patched()
    would, reasons = _would_patch(installed, off)
    not_intercepted = {
        library: f"{distribution} {version_of(distribution, library)}: no adapter"
        for library, distribution in UNADAPTED.items()
        if library in sys.modules
        and not any(adapted.partition(".")[0] == library for adapted in LIBRARIES)
    }
    for library in reasons:
        not_intercepted[library] = f"{_version(library)}: adapter off"
    return Report(
        __version__,
        sys.version.split()[0],
        patched,
        would,
        {library: f"{_version(library)}: {reason}" for library, reason in reasons.items()},
        not_intercepted,
        list(_wrappers()),
        _not_imported(),
    )


def _patched() -> list[PatchRow]:
    """What is patched now: the ledger's patches (each once), the import hook, the audit
    hook of the network guard."""
    patched: list[PatchRow] = []
    for entry in ledger.entries():
        row = patch_rows(entry.library, [entry.patch], entry.state)[0]
        patched.append(
            PatchRow(
                row.library,
                row.version,
                row.attribute,
                row.technique,
                _reversible(entry),
                entry.state,
            )
        )
    patched = list({(row.attribute, row.technique): row for row in patched}.values())
    if hooked():
        patched.append(
            PatchRow("agenttape", __version__, "sys.meta_path", "import hook", "yes", "")
        )
    if network_guard.watching():
        patched.append(
            PatchRow(
                "socket",
                sys.version.split()[0],
                "sys.addaudithook (socket.connect)",
                "audit hook",
                "no: Python keeps it; it does nothing while no cassette records",
                "",
            )
        )
    return patched


def _would_patch(
    installed: Collection[str], off: Mapping[str, str]
) -> tuple[list[PatchRow], dict[str, str]]:
    """What installing would patch in the libraries imported now; and each library whose
    adapter stays off, with why."""
    would: list[PatchRow] = []
    reasons = dict(off)
    for library, module in _imported():
        if library in installed or library in off:
            continue
        try:
            patches = declared(library, module)
        except Exception as exc:
            reasons[library] = f"would stay off: {type(exc).__name__}: {exc}"
            continue
        fresh = [patch for patch in patches if ledger.installed(patch.target, patch.name) is None]
        would += patch_rows(library, fresh, "not yet")
    return would, reasons


def _not_imported() -> dict[str, str]:
    """Adapted libraries installed but not imported here, by distribution and version: read
    from their metadata, since importing them all is what made the command slow."""
    found: dict[str, str] = {}
    for library, record in LIBRARIES.items():
        distribution = record.distribution
        if library in sys.modules or distribution == "Python" or distribution in found:
            continue
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[distribution] = metadata.version(distribution)
    return found


def _import_installed() -> None:
    """Import each library agenttape adapts that is installed (patching nothing)."""
    for library in (*LIBRARIES, *THREADS):
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if importlib.util.find_spec(library) is not None:
                importlib.import_module(library)


def _imported() -> Iterator[tuple[str, types.ModuleType]]:
    for library in LIBRARIES:
        module = sys.modules.get(library)
        if module is not None:
            yield library, module


# -- other wrappers --------------------------------------------------------------------------


def _scanned_modules() -> Iterator[tuple[str, types.ModuleType]]:
    """The modules of every adapted library imported, by library (its top package)."""
    tops = {
        library if library.partition(".")[0] in {"http", "socket"} else library.partition(".")[0]
        for library in LIBRARIES
    }
    tops.update(THREADS)
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        top = next((top for top in tops if name == top or name.startswith(f"{top}.")), None)
        if top is not None:
            yield top, module


class _Owners:
    """Which module made a function or a wrapper: read from its code's file, since
    ``functools.wraps`` copies the wrapped function's ``__module__``."""

    def __init__(self) -> None:
        self._by_file: dict[str, str] = {}
        for name, module in sorted(list(sys.modules.items()), key=lambda item: -len(item[0])):
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                self._by_file[path] = name  # the shortest name of a module known by several

    def __call__(self, value: Any) -> tuple[str, str] | None:
        """(module, file) of the code behind ``value``; None for what has no Python code."""
        wrapper = _wrapt_wrapper(value)
        if wrapper is not None:
            value = wrapper
        while isinstance(value, functools.partial):
            value = value.func
        value = getattr(value, "__func__", value)
        code = getattr(value, "__code__", None)
        if not isinstance(value, types.FunctionType) or code is None:
            return None
        return self._by_file.get(code.co_filename, "?"), code.co_filename


def _wrapt_wrapper(value: Any) -> Any:
    """The wrapper function of a wrapt ``FunctionWrapper`` (None for anything else)."""
    if "wrapt" in type(value).__module__ or type(value).__name__.endswith("FunctionWrapper"):
        return getattr(value, "_self_wrapper", None)
    return None


def _name_of(module: str) -> str:
    top = module.partition(".")[0]
    return KNOWN_WRAPPERS.get(top, top)


def _home(top: str) -> str:
    """The folder (a package) or file (a module) of the library ``top``."""
    module = sys.modules.get(top)
    path = str(getattr(module, "__file__", "") or "")
    return path.rpartition("/")[0] + "/" if hasattr(module, "__path__") else path


def _wrappers() -> Iterator[WrapperRow]:
    owners = _Owners()
    homes: dict[str, str] = {}
    for top, module in _scanned_modules():
        home = homes.setdefault(top, _home(top))
        for owner, name, value in _attributes(module):
            links = [_describe(link, owners, top, home) for link in ledger.chain(value)]
            foreign = [link for link in links if not link.startswith(("agenttape", top))]
            if not foreign:
                continue
            known = any(link.partition(" ")[0] in KNOWN_WRAPPERS.values() for link in foreign)
            if not known and not (len(links) > 1 and links[-1] == f"{top} (original)"):
                continue
            first = links.index(foreign[0])
            yield WrapperRow(
                top,
                f"{owner}.{name}",
                foreign[0],
                links,
                any(link.startswith("agenttape") for link in links[first + 1 :]),
            )


def _attributes(module: types.ModuleType) -> Iterator[tuple[str, str, Any]]:
    """Functions and wrappers on the module and on the classes it defines.

    Types are read with ``type()``, not ``isinstance()``: a lazy proxy (the openai SDK's)
    answers ``__class__`` by importing what it stands for, which made the walk take seconds."""
    for name, value in list(vars(module).items()):
        kind = type(value)
        if issubclass(kind, type) and value.__module__ == module.__name__:
            for attribute, member in list(vars(value).items()):
                if callable(member) or issubclass(type(member), (staticmethod, classmethod)):
                    yield f"{module.__name__}.{value.__qualname__}", attribute, member
        elif callable(value) and not issubclass(kind, (type, types.ModuleType)):
            yield module.__name__, name, value


def _describe(link: Any, owners: _Owners, top: str, home: str) -> str:
    """One link of a wrapper chain: agenttape's, the library's own, or another's by name."""
    if isinstance(link, types.FunctionType) and ledger.MARK in (link.__kwdefaults__ or {}):
        return "agenttape (inert)"
    if ledger.owned(link) is not None:
        return "agenttape"
    made = owners(link)
    if made is None:
        return f"{top} (original)"
    module, path = made
    package = module.partition(".")[0]
    if path.startswith(home) or package in _NOT_WRAPPERS or module == "?":
        return f"{top} (original)"
    return f"{_name_of(module)} ({module})"


# -- output ----------------------------------------------------------------------------------


def write(found: Report, out: TextIO, *, as_json: bool) -> None:
    if as_json:
        json.dump(asdict(found), out, indent=2)
        out.write("\n")
        return
    out.write(f"agenttape {found.agenttape} doctor (Python {found.python})\n\n")
    _table(out, f"Patched now ({len(found.patched)})", found.patched)
    _table(out, f"Patched when a cassette opens ({len(found.would_patch)})", found.would_patch)
    out.write(f"Adapters off ({len(found.off)})\n")
    for library, reason in found.off.items():
        out.write(f"  {library}: {reason}\n")
    out.write(f"\nImported and not intercepted ({len(found.not_intercepted)})\n")
    for library, reason in found.not_intercepted.items():
        out.write(f"  {library}: {reason}\n")
    out.write(f"\nOther wrappers on these libraries ({len(found.wrappers)})\n")
    for row in found.wrappers:
        over = "  [over agenttape's]" if row.over_agenttape else ""
        out.write(f"  {row.attribute}: {row.by}{over}\n    {' -> '.join(row.chain)}\n")
    out.write(
        f"\nInstalled and not imported in this process ({len(found.not_imported)})\n"
        "  (not inspected; --import MODULE imports one first)\n"
    )
    for distribution, version in found.not_imported.items():
        out.write(f"  {distribution} {version}\n")


def _table(out: TextIO, title: str, rows: list[PatchRow]) -> None:
    out.write(f"{title}\n")
    if rows:
        head = ("library", "version", "attribute", "technique", "reversible")
        cells = [
            head,
            *((r.library, r.version, r.attribute, r.technique, r.reversible) for r in rows),
        ]
        widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
        for row in cells:
            out.write(
                "  "
                + "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
                + "\n"
            )
    out.write("\n")


def run_doctor(args: argparse.Namespace, out: TextIO) -> int:
    write(report(imports=tuple(args.imports), install=args.install), out, as_json=args.json)
    return 0


COMMANDS = (
    command(
        "doctor",
        run_doctor,
        JSON,
        flag("--install", "install the adapters first, as a cassette would"),
        arg(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="MODULE",
            help="import MODULE first (the one that sets up your instrumentation); repeatable",
        ),
        help="what agenttape patches here, what it would patch, and other wrappers beside it",
    ),
)


_DUNDER = re.compile(r"__[a-z]+__")


def _quoted(match: re.Match[str]) -> str:
    return f"`{match.group(0)}`"


def ledger_table() -> str:
    """Every patch agenttape can make with the libraries installed here, as the Markdown table
    docs/architecture.md shows (tests/test_ledger.py keeps the two in step)."""
    _import_installed()
    rows: dict[tuple[str, str], str] = {}
    groups: list[tuple[str, list[ledger.Patch]]] = [
        (library, declared(library, module)) for library, module in _imported()
    ]
    groups += [("threading", threads.patches()), ("subprocess", children.patches())]
    python = {"threading": "Python", "subprocess": "Python"}
    for library, patches in groups:
        distribution = python.get(library) or LIBRARIES[library].distribution
        for row in patch_rows(library, patches, ""):
            rows.setdefault((row.attribute, row.technique), distribution)
    lines = ["| library | attribute | technique | reversible |", "|---|---|---|---|"]
    lines += [
        f"| {distribution} | `{attribute}` | {_DUNDER.sub(_quoted, technique)} | yes |"
        for (attribute, technique), distribution in rows.items()
    ]
    lines += [
        "| agenttape | `sys.meta_path` | import hook | yes |",
        "| Python | `sys.addaudithook` (`socket.connect`) | audit hook | no: Python keeps it; "
        "it does nothing while no cassette records |",
    ]
    return "\n".join(lines)
