"""pycurl: ``Curl.perform`` with the options people set (URL, HTTPHEADER, POSTFIELDS or a
READFUNCTION, WRITEFUNCTION or WRITEDATA, HEADERFUNCTION, CUSTOMREQUEST), and ``getinfo``
after it. See ``libcurl`` for what is served there.

``pycurl.Curl`` is a C type whose methods cannot be replaced: the module's ``Curl`` becomes
a subclass of it that keeps what ``setopt`` was told. A handle made from the class taken
before the patch (``from pycurl import Curl`` earlier) is not intercepted. A replayed failure
is ``pycurl.error`` with libcurl's code and message, as live.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Replay, begin, serving
from .._core.models import Failure
from .._core.tape import Recording
from . import ledger, libcurl, native_guard

__tracebackhide__ = passed_through

_CALLBACKS = (
    libcurl.WRITEFUNCTION,
    libcurl.WRITEDATA,
    libcurl.HEADERFUNCTION,
    libcurl.HEADERDATA,
)


def install(module: ModuleType) -> list[ledger.Patch]:
    real = _real(module)
    error = real.error
    flavour = libcurl.Flavour(
        "pycurl",
        text=str,
        error=lambda code, message: error(code, libcurl.plain(message)),
        aborts=lambda returned, size: returned is not None and returned != size,
    )
    for name in ("setopt", "unsetopt", "reset", "perform", "getinfo", "getinfo_raw"):
        getattr(real.Curl, name)
    patches = [
        ledger.subclass(real, "Curl", lambda base: _namespace(base, flavour)),
        ledger.subclass(real, "CurlMulti", _multi),
    ]
    if module is not real:
        # pytest-recording's stand-in: its Curl holds a handle of the real class, made by a
        # default it took before our patch; it is given one of ours.
        stand_in = module.Curl
        if "handle" not in getattr(stand_in, "__dataclass_fields__", {}):
            raise ledger.PatchError(f"{stand_in!r} stands in for pycurl.Curl in a way not known")
        patches.append(ledger.wrap(stand_in, "__init__", lambda found: _handing(found, real)))
    return patches


def _multi(base: type) -> dict[str, Any]:
    """``CurlMulti`` drives its handles' transfers in libcurl, outside ``perform``: they are
    not recorded, and blocked while the network is."""
    base_add_handle: Callable[..., Any] = base.add_handle  # type: ignore[attr-defined]

    def add_handle(self: Any, handle: Any) -> Any:
        native_guard.check("pycurl's CurlMulti.add_handle (a CurlMulti's transfers)")
        return base_add_handle(self, handle)

    return {"add_handle": add_handle, "__module__": base.__module__, "__doc__": base.__doc__}


def _real(module: Any) -> ModuleType:
    """pycurl itself, where ``sys.modules["pycurl"]`` holds another library's stand-in for
    it (pytest-recording puts one there for a whole test session): the module that stand-in
    was made by holds the real one."""
    if getattr(getattr(module, "Curl", None), "__module__", None) == "pycurl":
        real: ModuleType = module
        return real  # its Curl is pycurl's own (pytest-recording's is a ModuleType too)
    maker = sys.modules.get(type(module).__module__)
    for value in vars(maker).values() if maker is not None else ():
        if isinstance(value, ModuleType) and value.__name__ == "pycurl":
            return value
    raise ledger.PatchError(f"sys.modules['pycurl'] is {type(module).__qualname__}, not pycurl")


def _handing(original: Callable[..., None], real: ModuleType) -> Callable[..., None]:
    def __init__(self: Any, handle: Any = None) -> None:
        original(self, real.Curl() if handle is None else handle)

    return __init__


def failure_of(exc: BaseException) -> Failure | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) != 2 or not isinstance(args[0], int):
        return None
    code, message = args
    return libcurl.failure_of(code, str(message), type(exc).__name__)


def _namespace(base: type, flavour: libcurl.Flavour) -> dict[str, Any]:
    base_setopt: Callable[..., Any] = base.setopt  # type: ignore[attr-defined]
    base_unsetopt: Callable[..., Any] = base.unsetopt  # type: ignore[attr-defined]
    base_reset: Callable[..., Any] = base.reset  # type: ignore[attr-defined]
    base_perform: Callable[..., Any] = base.perform  # type: ignore[attr-defined]
    base_getinfo: Callable[..., Any] = base.getinfo  # type: ignore[attr-defined]
    base_getinfo_raw: Callable[..., Any] = base.getinfo_raw  # type: ignore[attr-defined]

    def setopt(self: Any, option: int, value: Any) -> None:
        base_setopt(self, option, value)
        _easy(self).set(int(option), value)

    def unsetopt(self: Any, option: int) -> None:
        base_unsetopt(self, option)
        _easy(self).options.pop(int(option), None)

    def reset(self: Any) -> None:
        base_reset(self)
        vars(self).pop("_agenttape_easy", None)

    def getinfo(self: Any, option: int) -> Any:
        kept = _easy(self)
        if kept.replayed is None:
            return base_getinfo(self, option)
        return libcurl.info(kept, int(option), flavour)

    def getinfo_raw(self: Any, option: int) -> Any:
        kept = _easy(self)
        if kept.replayed is None:
            return base_getinfo_raw(self, option)
        value = libcurl.info(kept, int(option), flavour)
        return value.encode("latin-1") if isinstance(value, str) else value

    def perform(self: Any) -> None:
        kept = _easy(self)
        kept.replayed = None
        tape = runtime.active()
        if tape is None or _connect_only(kept):
            base_perform(self)
            return
        plan = begin(tape, kept.request(flavour.library))
        with serving(tape, plan, failure_of):
            if isinstance(plan, Replay):
                plan.playback.wait(plan.playback.head)
                libcurl.replay(kept, plan.interaction, flavour)
                return
            _record(self, kept, plan.recording, base_setopt, base_unsetopt, base_perform)

    return {
        "setopt": setopt,
        "unsetopt": unsetopt,
        "reset": reset,
        "getinfo": getinfo,
        "getinfo_raw": getinfo_raw,
        "perform": perform,
        "__module__": base.__module__,
        "__doc__": base.__doc__,
    }


def _connect_only(kept: libcurl.Easy) -> bool:
    """A raw connection (CONNECT_ONLY) is no exchange: the network guard decides on it."""
    if not kept.options.get(libcurl.CONNECT_ONLY):
        return False
    native_guard.check("pycurl's Curl.perform of a raw connection (CONNECT_ONLY)")
    return True


def _easy(curl: Any) -> libcurl.Easy:
    """What agenttape keeps of a handle's options (pycurl hands none of them back)."""
    found: libcurl.Easy | None = vars(curl).get("_agenttape_easy")
    if found is None:
        found = vars(curl)["_agenttape_easy"] = libcurl.Easy()
    return found


def _record(
    curl: Any,
    kept: libcurl.Easy,
    recording: Recording,
    setopt: Callable[..., Any],
    unsetopt: Callable[..., Any],
    perform: Callable[..., Any],
) -> None:
    """The live perform, its head and body teed into ``recording`` as they come, and the
    user's own callbacks put back after it."""
    tee = libcurl.Tee(kept, recording)
    libcurl.keep_off_the_run_proxy(kept, lambda option, value: setopt(curl, option, value))
    setopt(curl, libcurl.HEADERFUNCTION, tee.header)
    setopt(curl, libcurl.WRITEFUNCTION, tee.write)
    reader = kept.options.get(libcurl.READFUNCTION)
    if reader is not None:
        setopt(curl, libcurl.READFUNCTION, reader)
    if tee.decoding:  # the body is recorded as it came; the tee decodes it
        setopt(curl, libcurl.HTTP_CONTENT_DECODING, 0)
    try:
        perform(curl)
    except BaseException as exc:
        tee.ended(failure_of(exc) or Failure("raised", type(exc).__name__, str(exc)))
        raise
    finally:
        for option in (libcurl.HEADERFUNCTION, libcurl.WRITEFUNCTION):
            unsetopt(curl, option)
        for option in _CALLBACKS:
            if option in kept.options:
                setopt(curl, option, kept.options[option])
        if tee.decoding:
            setopt(curl, libcurl.HTTP_CONTENT_DECODING, 1)
    tee.ended(None)
