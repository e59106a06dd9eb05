"""curl_cffi: ``Session`` and ``AsyncSession`` of ``curl_cffi.requests`` (streamed or not)
and its ``Curl`` handle used directly, at libcurl's door: ``Curl.perform`` for every sync
request (a streamed one performs in curl_cffi's worker thread), ``AsyncCurl.add_handle`` for
every async one. See ``libcurl`` for what is served there.

The response is the one curl_cffi builds itself from the handle's callbacks and ``getinfo``:
a real ``curl_cffi.requests.Response``. A replayed failure is ``CurlError`` with libcurl's
code, which curl_cffi turns into its own exception as live (``ConnectionError``,
``Timeout``). The browser a request impersonates is written down as a request header
``curl_cffi-impersonate`` (libcurl adds that browser's headers where Python cannot see them).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Replay, begin, serving
from .._core.models import Failure
from .._core.tape import Recording
from .._core.tracebacks import noting, noting_async
from . import ledger, libcurl, native_guard

__tracebackhide__ = passed_through

_EASY = "_agenttape_easy"
_CLEARED_BY_PERFORM = (
    libcurl.HTTPHEADER,
    libcurl.WRITEFUNCTION,
    libcurl.WRITEDATA,
    libcurl.HEADERFUNCTION,
    libcurl.HEADERDATA,
    libcurl.READFUNCTION,
    libcurl.READDATA,
    libcurl.POSTFIELDS,
)
"""What curl_cffi's ``perform`` lets go of afterwards (``clean_handles_and_buffers``)."""
_WRITEFUNC_ERROR = 0xFFFFFFFF
_SET_BY = "_agenttape_set_by"
"""The thread that set the handle's URL (the caller's; a streamed perform runs in another)."""
_ASKED = "_agenttape_asked"
"""Set when ``getinfo`` is asked about the handle's response."""
_READ_GRACE = 5.0


def install(module: ModuleType) -> list[ledger.Patch]:
    if module.__name__ == "curl_cffi.requests.session":
        # the sessions raise their own errors from libcurl's, the one replayed: the note
        # goes on the one the caller catches
        return [
            ledger.wrap(module.Session, "request", noting),
            ledger.wrap(module.AsyncSession, "request", noting_async),
        ]
    if module.__name__ == "curl_cffi.aio":
        return [ledger.wrap(module.AsyncCurl, "add_handle", _make_add_handle)]
    curl = module.Curl
    module.CurlError  # noqa: B018
    return [
        ledger.wrap(curl, "setopt", _make_setopt),
        ledger.wrap(curl, "impersonate", _make_impersonate),
        ledger.wrap(curl, "reset", _make_reset),
        ledger.wrap(curl, "getinfo", _make_getinfo),
        ledger.wrap(curl, "perform", _make_perform),
    ]


def _error(code: int, message: str) -> BaseException:
    error: BaseException = sys.modules["curl_cffi.curl"].CurlError(message, code=code)
    return error


_flavour = libcurl.Flavour(
    "curl_cffi",
    text=lambda value: value.encode(),
    error=_error,
    aborts=lambda returned, size: returned == _WRITEFUNC_ERROR,
)


def _easy(curl: Any) -> libcurl.Easy:
    easy: libcurl.Easy | None = vars(curl).get(_EASY)
    if easy is None:
        easy = vars(curl)[_EASY] = libcurl.Easy()
    return easy


def _make_setopt(original: Callable[..., Any]) -> Callable[..., Any]:
    def setopt(self: Any, option: Any, value: Any) -> Any:
        result = original(self, option, value)
        options = _easy(self).options
        number = int(option)
        if number == libcurl.URL:
            vars(self)[_SET_BY] = threading.get_ident()
            vars(self)[_ASKED] = threading.Event()
        if number == libcurl.HTTPHEADER:  # curl_cffi appends to the list until perform
            options[number] = [*options.get(number, ()), *value]
        else:
            _easy(self).set(number, value)
        return result

    return setopt


def _make_impersonate(original: Callable[..., Any]) -> Callable[..., Any]:
    def impersonate(self: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, target, *args, **kwargs)
        _easy(self).impersonate = str(target)
        return result

    return impersonate


def _make_reset(original: Callable[..., Any]) -> Callable[..., Any]:
    def reset(self: Any) -> Any:
        vars(self).pop(_EASY, None)
        return original(self)

    return reset


def _make_getinfo(original: Callable[..., Any]) -> Callable[..., Any]:
    def getinfo(self: Any, option: Any) -> Any:
        asked = vars(self).get(_ASKED)
        if asked is not None:
            asked.set()
        easy: libcurl.Easy | None = vars(self).get(_EASY)
        if easy is None or easy.replayed is None:
            return original(self, option)
        return libcurl.info(easy, int(option), _flavour)

    return getinfo


def failure_of(exc: BaseException) -> Failure | None:
    code = getattr(exc, "code", None)
    if not isinstance(code, int) or not code:
        return None
    return libcurl.failure_of(int(code), str(exc.args[0] if exc.args else exc), "CurlError")


def _tee(curl: Any, setopt: Callable[..., Any], easy: libcurl.Easy, recording: Recording) -> Any:
    tee = libcurl.Tee(easy, recording)
    libcurl.keep_off_the_run_proxy(easy, lambda option, value: setopt(curl, option, value))
    # A sink with ``write``, not a function: curl_cffi before 0.9 sets a HEADERFUNCTION up as
    # the body's write callback.
    setopt(curl, libcurl.HEADERDATA, SimpleNamespace(write=tee.header))
    setopt(curl, libcurl.WRITEFUNCTION, tee.write)
    reader = easy.options.get(libcurl.READFUNCTION)
    if reader is not None:
        setopt(curl, libcurl.READFUNCTION, reader)
    if tee.decoding:  # the body is recorded as it came; the tee decodes it for the callback
        setopt(curl, libcurl.HTTP_CONTENT_DECODING, 0)
    return tee


def _forget(easy: libcurl.Easy) -> None:
    for option in _CLEARED_BY_PERFORM:
        easy.options.pop(option, None)


def _make_perform(original: Callable[..., Any]) -> Callable[..., Any]:
    def perform(self: Any, *args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        easy = _easy(self)
        easy.replayed = None
        if tape is None:
            return original(self, *args, **kwargs)
        if easy.options.get(libcurl.CONNECT_ONLY):
            native_guard.check("curl_cffi's Curl.perform of a raw connection (ws_connect)")
            return original(self, *args, **kwargs)
        flavour = _flavour
        setopt = type(self).setopt
        unwrapped = ledger.installed(type(self), "setopt")
        raw_setopt = setopt if unwrapped is None else unwrapped.original
        plan = begin(tape, easy.request(flavour.library))
        with serving(tape, plan, failure_of):
            if isinstance(plan, Replay):
                try:
                    plan.playback.wait(plan.playback.head)
                    libcurl.replay(easy, plan.interaction, flavour)
                finally:
                    _forget(easy)
                _hold_until_the_head_is_read(self)
                return None
            tee = _tee(self, raw_setopt, easy, plan.recording)
            try:
                result = original(self, *args, **kwargs)
            except BaseException as exc:
                tee.ended(failure_of(exc) or Failure("raised", type(exc).__name__, str(exc)))
                _hold_until_the_head_is_read(self)
                raise
            finally:
                _forget(easy)
                if tee.decoding:
                    raw_setopt(self, libcurl.HTTP_CONTENT_DECODING, 1)
            tee.ended(None)
            _hold_until_the_head_is_read(self)
            return result

    return perform


def _hold_until_the_head_is_read(curl: Any) -> None:
    """A streamed request performs in curl_cffi's worker thread. Up to 0.14 the caller hooks
    a cleanup on the perform's end only after starting it, and that cleanup waits for the
    caller to parse the head. A perform that ended first (a replay, or a fast live answer:
    curl_cffi alone deadlocks on those under load) runs the cleanup in the caller, which then
    waits for itself for ever. Ending once the caller has asked ``getinfo`` keeps the order."""
    asked = vars(curl).get(_ASKED)
    if asked is not None and vars(curl).get(_SET_BY) != threading.get_ident():
        asked.wait(_READ_GRACE)


def _make_add_handle(original: Callable[..., Any]) -> Callable[..., Any]:
    def add_handle(self: Any, curl: Any) -> Any:
        tape = runtime.active()
        if tape is None or not isinstance(vars(curl).get(_EASY), libcurl.Easy):
            return original(self, curl)
        flavour = _flavour
        easy = _easy(curl)
        easy.replayed = None
        plan = begin(tape, easy.request(flavour.library))
        if isinstance(plan, Replay):
            future = self.loop.create_future()
            try:
                with serving(tape, plan, failure_of):
                    libcurl.replay(easy, plan.interaction, flavour)
            except sys.modules["curl_cffi.curl"].CurlError as exc:
                future.set_exception(exc)  # as libcurl's multi handle reports it
            else:
                future.set_result(None)
            finally:
                _forget(easy)
            return future
        unwrapped = ledger.installed(type(curl), "setopt")
        raw_setopt = type(curl).setopt if unwrapped is None else unwrapped.original
        tee = _tee(curl, raw_setopt, easy, plan.recording)
        _forget(easy)
        future = original(self, curl)

        def ended(done: Any) -> None:
            if done.cancelled():
                tee.ended(Failure("raised", "CancelledError", "cancelled"))
                return
            exc = done.exception()
            if exc is None:
                tee.ended(None)
            else:
                tee.ended(failure_of(exc) or Failure("raised", type(exc).__name__, str(exc)))

        future.add_done_callback(ended)
        return future

    return add_handle
