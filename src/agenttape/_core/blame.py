"""Warnings blamed on the user's code, not on agenttape's.

A cassette closes deep in agenttape (and, with the marker, in its pytest plugin called by
pytest), so a fixed ``stacklevel`` named agenttape's frames: pytest's warning summary pointed
into the plugin instead of the test. ``warn`` walks the stack to the first frame of neither
agenttape nor the machinery that calls it; when only pytest runs the cassette (the marker,
a fixture's teardown) the test function being run is blamed.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

MACHINERY = (
    "agenttape",
    "contextlib",
    "_pytest",
    "pluggy",
    "pytest",
    "asyncio",
    "concurrent",
    "threading",
)
"""Packages whose frames stand between the user's code and a warning: never blamed."""


def warn(message: str | Warning, category: type[Warning] = UserWarning, source: Any = None) -> None:
    """``warnings.warn`` at the user's line: the ``with`` (or the decorated test) that holds
    the cassette, or the test pytest is running."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.partition(".")[0] not in MACHINERY:
            _warn_at(message, category, source, frame.f_code, frame.f_lineno, frame.f_globals)
            return
        test = _test_of(frame)
        if test is not None:
            code = test.__code__
            _warn_at(message, category, source, code, code.co_firstlineno, test.__globals__)
            return
        frame = frame.f_back
    warnings.warn(message, category, stacklevel=2, source=source)


def _test_of(frame: types.FrameType) -> types.FunctionType | None:
    """The test function a pytest frame is running (its ``item``), unwrapped; or None."""
    for name in ("pyfuncitem", "item"):
        function: Any = getattr(frame.f_locals.get(name), "function", None)
        while hasattr(function, "__wrapped__"):
            function = function.__wrapped__
        if isinstance(function, types.FunctionType):
            return function
    return None


def _warn_at(
    message: str | Warning,
    category: type[Warning],
    source: Any,
    code: types.CodeType,
    line: int,
    module_globals: dict[str, Any],
) -> None:
    warnings.warn_explicit(
        message,
        category,
        code.co_filename,
        line,
        module=str(module_globals.get("__name__", "")),
        registry=module_globals.setdefault("__warningregistry__", {}),
        source=source,
    )


def passed_through(excinfo: Any) -> bool:
    """pytest's ``__tracebackhide__`` for the modules whose functions stand in a library's
    place (set at their top). A cassette leaves them installed, and a later test's failure
    that only passes through them reads as it would without agenttape: their frames leave
    the report when the exception came from below them (the library they call, or an
    ``OSError`` of a system call they make for it). Raised by agenttape's own code, a bug
    among them, they stay."""
    if excinfo is None:  # pytest before 7.4 may ask without one
        return False
    exception = excinfo.value
    if isinstance(exception, OSError):
        return True
    last = excinfo.tb
    while last.tb_next is not None:
        last = last.tb_next
    return str(last.tb_frame.f_globals.get("__name__", "")).partition(".")[0] != "agenttape"
