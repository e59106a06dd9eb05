"""The send level: requests' ``HTTPAdapter.send`` and botocore's ``URLLib3Session.send``
served above urllib3 when the pool and the head are already known."""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from ..._core.blame import passed_through
from ..._core.tape import Tape
from ..._core.tracebacks import noting
from .. import ledger
from .exchange import handed_down, known_exchange, known_head
from .future import is_future

__tracebackhide__ = passed_through

R = TypeVar("R")


class KeptSteps:
    """Whether a class keeps ``base``'s own ``steps`` (the methods a client's ``send`` goes
    through on its way to urllib3): one overriding any of them is left to itself. Answered
    once per class."""

    def __init__(self, base: type, steps: tuple[str, ...]) -> None:
        self._base = base
        self._steps = steps
        self._kept: dict[type, bool] = {}

    def __call__(self, cls: type) -> bool:
        kept = self._kept.get(cls)
        if kept is None:
            base = self._base
            kept = all(getattr(cls, name) is getattr(base, name) for name in self._steps)
            self._kept[cls] = kept
        return kept


def send_installer(
    class_name: str,
    steps: tuple[str, ...],
    make: Callable[..., Callable[..., Any]],
    **taken: str,
) -> Callable[[ModuleType], list[ledger.Patch]]:
    """The ``install`` of an adapter serving where a client's ``send`` is entered: it puts
    ``make(original send, kept steps, **taken)`` in place of ``send`` on the library module's
    ``class_name``, each of ``taken`` being the module attribute it names. A class without
    one of ``steps`` (another version of its library) is left as it is."""

    def install(module: ModuleType) -> list[ledger.Patch]:
        base = getattr(module, class_name)
        if not all(hasattr(base, name) for name in steps):
            return []
        urllib3 = sys.modules.get("urllib3")
        if urllib3 is not None and is_future(urllib3):
            return []  # its requests are served where they enter urllib3-future's pools
        options = {name: getattr(module, attribute) for name, attribute in taken.items()}
        return [
            ledger.wrap(
                base,
                "send",
                lambda original: noting(make(original, KeptSteps(base, steps), **options)),
            )
        ]

    return install


class _PoolsSeen:
    """For each client object above urllib3 (a requests adapter, a botocore session): the
    connection pool it used for a place (an origin, with whatever else chose the pool), as
    its pool manager still holds it — a later request to the same place can skip the
    lookup; one the manager has let go since is not used again."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[Any, dict[Any, tuple[Any, Any, Any]]] = (
            weakref.WeakKeyDictionary()
        )

    def find(self, client: Any, manager: Any, place: Any) -> Any:
        """The pool ``client`` used for ``place`` through ``manager``; None when unknown."""
        seen = self._by_client.get(client)
        if seen is None:
            return None
        try:
            found = seen.get(place)
        except TypeError:  # a place that cannot be a key
            return None
        if found is None or found[0] is not manager or manager.pools.get(found[1]) is not found[2]:
            return None
        return found[2]

    def learn(self, client: Any, manager: Any, place: Any, response: Any) -> None:
        """Keeps the pool ``response`` (urllib3's) came from, for ``place``."""
        pool = getattr(response, "_pool", None)
        if pool is None:
            return
        pools = manager.pools
        with pools.lock:
            held = getattr(pools, "_container", {})
            key = next((key for key, value in held.items() if value is pool), None)
        if key is None:
            return
        seen = self._by_client.get(client)
        if seen is None:
            seen = self._by_client.setdefault(client, {})
        with contextlib.suppress(TypeError):  # a place that cannot be a key
            seen[place] = (manager, key, pool)


def serve_at_send(
    tape: Tape,
    client: Any,
    manager: Any,
    place: Any,
    arguments_for: Callable[[Any], dict[str, Any] | None],
    send: Callable[[], R],
    answer: Callable[[Any], R],
) -> R:
    """A client's ``send`` (requests' adapter, botocore's session) served above urllib3: on
    the pool the client used for ``place`` before, with the head urllib3 would send known
    (``known_head``), the exchange begins right here (``known_exchange``) and ``answer``
    makes the client's response from urllib3's. A pool not seen yet is learnt from ``send``
    run as live (its response's ``raw``); a head not known goes through ``send`` as live.
    ``arguments_for(pool)`` are those ``send`` would pass to ``pool.urlopen`` (None: let
    ``send`` do it)."""
    pool = _POOLS_SEEN.find(client, manager, place)
    if pool is None:
        response = send()
        _POOLS_SEEN.learn(client, manager, place, getattr(response, "raw", None))
        return response
    arguments = arguments_for(pool)
    urllib3 = sys.modules["urllib3"]
    known = None if arguments is None else known_head(urllib3, pool, arguments)
    if arguments is None or known is None:
        return send()
    return known_exchange(
        urllib3,
        tape,
        known,
        arguments,
        answer=answer,
        hand_down=lambda plan: handed_down(tape, plan, send),
    )


# requests' adapters (by origin, verify and cert) and botocore's sessions (by origin).
_POOLS_SEEN = _PoolsSeen()


def origin_and_target(url: Any) -> tuple[str, str] | None:
    """``scheme://host[:port]`` and the target a client sends for ``url`` when no proxy
    applies (requests' ``path_url``, botocore's ``_path_url``); None for a URL where the two
    might not split so simply (credentials, a fragment, parameters, an empty query or path)."""
    if type(url) is not str:
        return None
    scheme_end = url.find("://")
    if scheme_end <= 0:
        return None
    cut = url.find("/", scheme_end + 3)
    if cut < 0:
        return None
    origin, target = url[:cut], url[cut:]
    if "@" in origin or "?" in origin or "#" in url or ";" in target or target.endswith("?"):
        return None
    return origin, target
