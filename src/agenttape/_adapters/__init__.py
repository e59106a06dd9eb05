"""Installs one adapter per HTTP library, only for libraries the process actually imports.

Nothing is imported eagerly: a library already imported is patched when the first cassette
opens, and one imported later is patched right after its own import finishes.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

from .._core import blame, runtime
from .._core.errors import AgentTapeWarning
from . import children, ledger, native_guard

if TYPE_CHECKING:
    import importlib.abc


HeadersAt = Literal["response", "own", "botocore"]
"""Where a status exception keeps the headers of the response it was made from: on its
``response``, as its own ``headers``, or in botocore's parsed ``ResponseMetadata``."""


@dataclass(frozen=True, slots=True)
class Library:
    """One library module agenttape patches, and all it knows about it in one place.

    ``adapter`` is the module whose ``install(library_module)`` declares the patches it
    needs (``ledger.Patch``; the ledger installs them all or none). ``distribution`` and
    ``unrecorded`` name, when the adapter cannot patch this version, what is then not
    recorded. ``status_error`` is, for a module whose status exceptions carry the note of an
    injected fault (``fault_notes``), the class every one is or derives from, and where its
    instance keeps the response headers (``headers_at``)."""

    adapter: str
    distribution: str
    unrecorded: str
    status_error: str | None = None
    headers_at: HeadersAt = "response"


def _status_errors(
    distribution: str, status_error: str, headers_at: HeadersAt = "response"
) -> Library:
    return Library(
        "agenttape._adapters.fault_notes",
        distribution,
        "nothing, but its status errors from faults carry no note",
        status_error,
        headers_at,
    )


_HTTPX = "agenttape._adapters.httpx"
_CURL_CFFI = "agenttape._adapters.curl_cffi"
_WEBSOCKETS = "agenttape._adapters.websocket.websockets"

LIBRARIES: dict[str, Library] = {
    "httpx": Library(_HTTPX, "httpx", "its requests"),
    "httpx2": Library(_HTTPX, "httpx2", "its requests (the openai and anthropic SDKs' included)"),
    "httpcore": Library(
        "agenttape._adapters.instrumented",
        "httpcore",
        "httpx's requests through an instrumented or mocked transport",
    ),
    "httpcore2": Library(
        "agenttape._adapters.instrumented",
        "httpcore2",
        "httpx2's requests through an instrumented or mocked transport",
    ),
    "openai._base_client": Library(
        "agenttape._adapters.sdk_retries", "openai", "nothing, but its retry waits are not skipped"
    ),
    "anthropic._base_client": Library(
        "agenttape._adapters.sdk_retries",
        "anthropic",
        "nothing, but its retry waits are not skipped",
    ),
    "os": Library(
        "agenttape._adapters.sdk_keys",
        "Python",
        "nothing, but an SDK client made in a replay needs a key",
    ),
    "urllib3": Library(
        "agenttape._adapters.urllib3", "urllib3", "requests through urllib3, requests and botocore"
    ),
    "requests.adapters": Library(
        "agenttape._adapters.requests",
        "requests",
        "nothing, but its replays take urllib3's longer path",
    ),
    "requests.sessions": Library(
        "agenttape._adapters.requests",
        "requests",
        "nothing, but a replayed body cut short lacks its note",
    ),
    "botocore.endpoint": Library(
        "agenttape._adapters.botocore", "botocore", "nothing, but its retry waits are not skipped"
    ),
    "botocore.httpsession": Library(
        "agenttape._adapters.botocore_session",
        "botocore",
        "nothing, but its replays take urllib3's longer path",
    ),
    "aiohttp": Library(
        "agenttape._adapters.aiohttp", "aiohttp", "its requests and ws_connect sessions"
    ),
    "websockets.asyncio.client": Library(
        _WEBSOCKETS, "websockets", "sessions of its asyncio client"
    ),
    "websockets.sync.client": Library(_WEBSOCKETS, "websockets", "sessions of its sync client"),
    "websockets.legacy.client": Library(
        "agenttape._adapters.websocket.websockets_legacy",
        "websockets",
        "sessions of its legacy client",
    ),
    "websocket._core": Library(
        "agenttape._adapters.websocket.websocket_client", "websocket-client", "its sessions"
    ),
    "httpx_ws._api": Library("agenttape._adapters.websocket.httpx_ws", "httpx-ws", "its sessions"),
    "grpc._channel": Library(
        "agenttape._adapters.grpcio.sync", "grpcio", "calls on its sync channels"
    ),
    "grpc.aio._channel": Library(
        "agenttape._adapters.grpcio.aio", "grpcio", "calls on its grpc.aio channels"
    ),
    "curl_cffi.curl": Library(_CURL_CFFI, "curl_cffi", "its sync requests and Curl handles"),
    "curl_cffi.aio": Library(_CURL_CFFI, "curl_cffi", "its AsyncSession requests"),
    "curl_cffi.requests.session": Library(
        _CURL_CFFI, "curl_cffi", "nothing, but a replayed failure's note is on libcurl's error"
    ),
    "pycurl": Library("agenttape._adapters.pycurl", "pycurl", "its Curl handles' performs"),
    "primp": Library("agenttape._adapters.primp", "primp", "its Client and AsyncClient requests"),
    "http.client": Library(
        "agenttape._adapters.http_client",
        "Python",
        "requests through http.client and urllib.request",
    ),
    "httplib2": Library(
        "agenttape._adapters.httplib2",
        "httplib2",
        "its requests (the Google API clients' included)",
    ),
    "tornado.simple_httpclient": Library(
        "agenttape._adapters.tornado", "tornado", "AsyncHTTPClient's requests"
    ),
    "socket": Library(
        "agenttape._adapters.network_guard", "Python", "nothing, but no connection is blocked"
    ),
    "openai._exceptions": _status_errors("openai", "APIStatusError"),
    "anthropic._exceptions": _status_errors("anthropic", "APIStatusError"),
    "google.genai.errors": _status_errors("google-genai", "APIError"),
    "botocore.exceptions": _status_errors("botocore", "ClientError", "botocore"),
    "requests.exceptions": _status_errors("requests", "HTTPError"),
    "httpx._exceptions": _status_errors("httpx", "HTTPStatusError"),
    "httpx2._exceptions": _status_errors("httpx2", "HTTPStatusError"),
    "aiohttp.client_exceptions": _status_errors("aiohttp", "ClientResponseError", "own"),
    "mistralai.client.errors.mistralerror": _status_errors("mistralai", "MistralError", "own"),
    "cohere.core.api_error": _status_errors("cohere", "ApiError", "own"),
}
"""Library module -> what agenttape patches there and how (``Library``); a library is
patched only once the process imports it."""


def library_of(name: str) -> Library:
    """The record of library module ``name``; one not in ``LIBRARIES`` (a test's own) is
    named after its top package."""
    found = LIBRARIES.get(name)
    if found is None:
        return Library("", name.partition(".")[0], "its traffic")
    return found


_installed: set[str] = set()
_off: dict[str, str] = {}
"""Libraries whose adapter could not patch them (a version whose internals it does not
know), with why: left as they are, said once; the network guard still stands in front of
them."""
_native: set[str] = set()
"""Clients of ``native_guard.NATIVE`` looked at since the adapters were installed."""
_named: set[str] = set()
"""Those named once in this process as not intercepted."""
_lock = threading.RLock()
_hook: _ImportHook | None = None


def _install(library: str, module: ModuleType) -> None:
    """Patches ``module`` with its adapter.

    No lock of agenttape is ever held across an import. This runs at the end of a library's
    import, while that thread holds the library's module lock; a thread that held ``_lock``
    while it waited on a module lock (importing the adapter, or a library another thread is
    still importing) would wait for it forever. So the adapter is imported first, and the
    lock guards only the patching, which imports nothing."""
    if library in _installed or library in _off:
        return
    failure: Exception
    try:
        adapter = importlib.import_module(LIBRARIES[library].adapter)
    except Exception as exc:  # never break the library's own import
        failure = exc
    else:
        with _lock:
            if library in _installed or library in _off:
                return
            try:
                ledger.apply(library, adapter.install(module))
            except Exception as exc:
                failure = exc
            else:
                _installed.add(library)  # only once the patch is in place
                return
    with _lock:
        if library in _off:
            return
        _off[library] = f"{type(failure).__name__}: {failure}"
    if library.partition(".")[0] not in native_guard.NATIVE:
        _warn_off(library, failure)  # a native client is named with its guard (_guard_native)


def _warn_off(library: str, failure: Exception) -> None:
    """Says once that ``library`` is not intercepted: which version, why, what that means."""
    record = library_of(library)
    distribution, what = record.distribution, record.unrecorded
    version = version_of(distribution, library)
    blame.warn(
        f"agenttape cannot intercept {distribution} {version} ({library}): "
        f"{type(failure).__name__}: {failure}. Not recorded or replayed: {what}. "
        "While a cassette that blocks the network is active, a connection it opens raises "
        "NetworkBlockedError; see the supported versions in agenttape's docs/libraries.md.",
        AgentTapeWarning,
    )


def version_of(distribution: str, library: str) -> str:
    if distribution == "Python":
        return sys.version.split()[0]
    try:
        from importlib import metadata

        return metadata.version(distribution)
    except Exception:
        top = sys.modules.get(library.partition(".")[0])
        return str(getattr(top, "__version__", "(version unknown)"))


def install_adapters() -> None:
    global _hook
    ledger.reinstate()  # a patch another tool took away since (blockbuster, stopping)
    # Every cassette and run calls this; once the import hook is in place there is seldom
    # anything to do, and threads opening runs at once should not queue on the lock for it.
    if (
        _hook is not None
        and all(
            library in _installed or library in _off or library not in sys.modules
            for library in LIBRARIES
        )
        and all(top in _native or top not in sys.modules for top in native_guard.NATIVE)
    ):
        return
    with _lock:
        if _hook is None:
            # First, so that a library whose import starts from now on is patched as it ends.
            _hook = _ImportHook()
            sys.meta_path.insert(0, _hook)
    for library in LIBRARIES:
        module = sys.modules.get(library)
        if module is None or library in _installed or library in _off:
            continue
        spec = getattr(module, "__spec__", None)
        if getattr(spec, "_initializing", False):
            # Another thread is importing it right now: wait for that import to finish (with
            # no lock of ours held), as a plain ``import`` would, then patch the whole module.
            module = importlib.import_module(library)
        _install(library, module)
    _guard_native()


def _guard_native() -> None:
    """Names each client of ``native_guard.NATIVE`` that is imported with no adapter in
    place (once), and guards its request methods; one whose adapters are in place is left to
    them."""
    for top, distribution in native_guard.NATIVE.items():
        module = sys.modules.get(top)
        if module is None or top in _native:
            continue
        mine = [library for library in LIBRARIES if library.partition(".")[0] == top]
        imported = [library for library in mine if library in sys.modules]
        if imported and all(library in _installed for library in imported):
            with _lock:
                _native.add(top)
            continue
        why = "; ".join(f"{library}: {_off[library]}" for library in imported if library in _off)
        try:
            guards = native_guard.patches(module)
            ledger.apply(f"{top} (guard)", guards)
        except Exception as exc:
            guards, problem = [], f" ({type(exc).__name__}: {exc})"
        else:
            problem = ""
        if guards:
            guarded = "its calls raise NetworkBlockedError"
        else:
            guarded = f"its calls cannot be guarded either{problem} and reach the network"
        with _lock:
            _native.add(top)
            if top in _named:
                continue
            _named.add(top)
        version = version_of(distribution, top)
        reason = why or "agenttape has no adapter for it"
        blame.warn(
            f"agenttape cannot intercept {distribution} {version}: {reason}. It opens its "
            "connections in native code, out of sight of agenttape's network guard: its "
            "requests are not recorded or replayed, and while a cassette that blocks the "
            f"network is active {guarded}. See the supported versions in agenttape's "
            "docs/libraries.md.",
            AgentTapeWarning,
        )


def uninstall() -> list[ledger.Entry]:
    """Puts back every original the adapters replaced and removes the import hook; the next
    cassette or run installs them again. Returns the patches left inert under another
    wrapper put on top of ours since (never removed)."""
    global _hook
    with _lock:
        if _hook is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(_hook)
            _hook = None
        left = ledger.remove()
        _installed.clear()
        _off.clear()
        _native.clear()
    return left


def declared(library: str, module: ModuleType) -> list[ledger.Patch]:
    """The patches the adapter of ``library`` would make on ``module`` (nothing is patched;
    raises what keeps the adapter off)."""
    adapter = importlib.import_module(LIBRARIES[library].adapter)
    return list(adapter.install(module))


def hooked() -> bool:
    """Whether the import hook that patches a library as its import ends is in place."""
    return _hook is not None


def state() -> tuple[frozenset[str], dict[str, str]]:
    """The libraries patched, and those whose adapter stayed off with why."""
    with _lock:
        return frozenset(_installed), dict(_off)


class _ImportHook:
    """Patches a library the moment its import completes (a meta path finder by protocol:
    ``importlib.abc`` would cost every ``import agenttape`` the import of importlib.resources)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        adapted = fullname in LIBRARIES and fullname not in _installed and fullname not in _off
        native = fullname in native_guard.NATIVE and fullname not in _native
        if not (adapted or native):
            return None

        def after(module: ModuleType) -> None:
            if adapted:
                _install(fullname, module)
            if native and runtime.active() is not None:
                _guard_native()  # imported under a cassette: named and guarded now

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = cast("importlib.abc.Loader", _PatchingLoader(spec.loader, after))
                return spec
        return None


class _PatchingLoader:
    def __init__(self, loader: Any, after: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._after(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


_enabled = False


def enable() -> None:
    """Lets every cassette or run that becomes active patch the libraries the process uses,
    and hand its state to child processes. ``import agenttape`` calls it, once."""
    global _enabled
    with _lock:
        if _enabled:
            return
        _enabled = True
    runtime.on_activation(install_adapters)
    runtime.on_change(children.update)
