"""Every attribute agenttape replaces on another library's objects, in one place.

An adapter declares its patches as data (``Patch``: a target, an attribute, and how the
replacement is made from the original found there at install time); ``apply`` checks every
one of them first and then installs them all or none, under one lock, writing down what was
there exactly (for a class or a module: its own value, or that it had none and inherited
one), so that ``restore`` puts back precisely that. Nothing here runs per call: a patched
attribute holds the replacement itself.

Another wrapper put on top of ours after we installed (OpenTelemetry's, Sentry's) is never
removed: ours, which it calls, is left in place and made inert, a pass-through to the
original (``inert``). The exotic techniques sit behind the helpers below (``subclass``,
``forwarder``, ``redirect_code``, ``default``); an adapter uses ``wrap``.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MARK = "__agenttape__"
"""The one name agenttape ever sets on an object of another library."""

ABSENT: Any = types.SimpleNamespace(name="(absent)")
"""What a target held under a name it had none of (nothing of its own: inherited or new)."""


Technique = Literal[
    "wrapper",
    "module attribute",
    "subclass made with type()",
    "__getattr__ forwarder",
    "attribute added",
    "__code__ swap",
]
"""How a patch replaces its attribute: a wrapper (``wrap``) on a class or, under this other
name, on a module; or one of the helpers below."""

State = Literal["installed", "inert", "covered", "restored"]
"""Where a patch in place stands (``Entry.state``)."""


def _is_callable(value: Any) -> bool:
    return callable(value)


@dataclass(frozen=True, slots=True)
class Patch:
    """``target.name`` becomes ``make(original)``; ``expect`` checks the original first (an
    attribute the target lacks fails the check unless ``new`` says it is added)."""

    target: Any
    name: str
    make: Callable[[Any], Any]
    technique: Technique = "wrapper"
    expect: Callable[[Any], bool] = _is_callable
    new: bool = False


@dataclass(slots=True, eq=False)
class Entry:
    """One patch in place: what it replaced (``own``: the target's own value, or ``ABSENT``)
    and with what. ``state`` is "installed"; "inert" (another wrapper sits on ours: ours only
    passes through) or "covered" (another sits on ours and ours cannot be made inert: left
    as it is) once removed; or "restored" (the original is back)."""

    library: str
    patch: Patch
    own: Any
    original: Any
    replacement: Any
    state: State = field(default="installed")
    # (own, original, replacement) of each earlier installation, newest last: what was put
    # back by the tool that took ours away is one of them, and is in place again as it was
    former: list[tuple[Any, Any, Any]] = field(default_factory=list)


class PatchError(Exception):
    """A library's internals are not the ones its adapter declares: nothing was patched."""


_lock = threading.RLock()
_entries: list[Entry] = []
_held: dict[tuple[int, str], Entry] = {}  # (id(target), name) -> entry installed there


def _own(target: Any, name: str) -> Any:
    if isinstance(target, (type, types.ModuleType)):
        return vars(target).get(name, ABSENT)
    return getattr(target, name, ABSENT)


def apply(library: str, patches: Sequence[Patch]) -> list[Entry]:
    """Installs every patch of ``patches`` not in place yet, or none (``PatchError`` names
    each one that does not fit, or the failure that stopped the install)."""
    with _lock:
        todo: list[tuple[Patch, Any]] = []
        problems: list[str] = []
        seen: set[tuple[int, str]] = set()
        for patch in patches:
            key = (id(patch.target), patch.name)
            if key in _held or key in seen:
                continue  # in place already (httpx2.alias_httpx() makes two names one module)
            seen.add(key)
            original = _found(patch)
            if _fits(patch, original):
                todo.append((patch, original))
            elif original is ABSENT:
                problems.append(f"{where(patch)} does not exist")
            else:
                problems.append(
                    f"{where(patch)} is not what it expects ({type(original).__name__})"
                )
        if problems:
            raise PatchError("; ".join(problems))
        made = [(patch, original, _named(patch, patch.make(original))) for patch, original in todo]
        done: list[Entry] = []
        try:
            for patch, original, replacement in made:
                entry = Entry(library, patch, _own(patch.target, patch.name), original, replacement)
                setattr(patch.target, patch.name, replacement)
                done.append(entry)
                _held[(id(patch.target), patch.name)] = entry
        except Exception as exc:
            for entry in reversed(done):
                _put_back(entry)
                del _held[(id(entry.patch.target), entry.patch.name)]
            raise PatchError(f"{type(exc).__name__}: {exc}") from exc
        _entries.extend(done)
        return done


def remove(library: str | None = None) -> list[Entry]:
    """Restores the patches of ``library`` (of every library when None), newest first; those
    another wrapper has since covered are made inert instead. Returns the inert ones."""
    left: list[Entry] = []
    with _lock:
        for entry in reversed(list(_entries)):
            if library is not None and entry.library != library:
                continue
            if entry.state == "installed":
                del _held[(id(entry.patch.target), entry.patch.name)]
                if _own(entry.patch.target, entry.patch.name) is entry.replacement:
                    _put_back(entry)
                elif inert(entry.replacement, entry.original):
                    entry.state = "inert"
                else:
                    entry.state = "covered"
            if entry.state != "restored":
                left.append(entry)
            else:
                _entries.remove(entry)
    return left


def reinstate() -> list[Entry]:
    """Installs again each patch someone else took away since (blockbuster, stopping, puts
    back the ``socket`` functions it found when it started, our guard's original among them):
    what stands there now, another tool's wrapper included, becomes its original and stays
    under ours. A patch is in place while the attribute is our replacement or a wrapper
    chain holding it (``chain``). Run on every activation: a look at each entry, no more,
    while nothing was taken away. Returns the entries installed again."""
    lost = [
        entry
        for entry in list(_entries)
        if getattr(entry.patch.target, entry.patch.name, None) is not entry.replacement
        and not _in_place(entry)
    ]
    if not lost:
        return lost
    done: list[Entry] = []
    with _lock:
        for entry in lost:
            patch = entry.patch
            if _in_place(entry) or _back_in_place(entry):
                continue
            if not _fits(patch, original := _found(patch)):
                continue
            own = _own(patch.target, patch.name)
            replacement = _named(patch, patch.make(original))
            setattr(patch.target, patch.name, replacement)
            entry.former.append((entry.own, entry.original, entry.replacement))
            entry.own, entry.original, entry.replacement = own, original, replacement
            done.append(entry)
    return done


def _in_place(entry: Entry) -> bool:
    if entry.state != "installed":
        return True
    value = _own(entry.patch.target, entry.patch.name)
    return value is entry.replacement or any(link is entry.replacement for link in reaches(value))


def _back_in_place(entry: Entry) -> bool:
    """Whether an earlier replacement of ``entry`` stands there again (the tool that took the
    newer one away put the one it found back): it becomes the entry's replacement once more,
    rather than be wrapped by another of ours."""
    links = list(reaches(_own(entry.patch.target, entry.patch.name)))
    for index, (own, original, replacement) in enumerate(entry.former):
        if any(link is replacement for link in links):
            entry.own, entry.original, entry.replacement = own, original, replacement
            del entry.former[index:]
            return True
    return False


def _named(patch: Patch, replacement: Any) -> Any:
    """A function put in place answers by the name it stands under, so that pickle (which finds
    a function again by its module and qualified name) and ``inspect.getmodule`` reach it: a
    wrapper copying its original's name would claim ``posix.system`` for ``os.system``, where
    the original stays, and could not be pickled. ``__wrapped__`` still leads to the original
    (``inspect.signature``, ``inspect.unwrap``)."""
    target = patch.target
    if not isinstance(replacement, types.FunctionType):
        return replacement
    if isinstance(target, types.ModuleType):
        replacement.__module__, replacement.__qualname__ = target.__name__, patch.name
    elif isinstance(target, type):
        replacement.__module__ = target.__module__
        replacement.__qualname__ = f"{target.__qualname__}.{patch.name}"
    return replacement


def _found(patch: Patch) -> Any:
    return getattr(patch.target, patch.name, ABSENT)


def _fits(patch: Patch, original: Any) -> bool:
    """Whether ``patch`` may be made over ``original`` (what ``apply`` checks first)."""
    if original is ABSENT:
        return patch.new
    return patch.expect(original)


def _put_back(entry: Entry) -> None:
    target, name = entry.patch.target, entry.patch.name
    if entry.own is ABSENT:
        delattr(target, name)
    else:
        setattr(target, name, entry.own)
    entry.state = "restored"


def entries() -> list[Entry]:
    """The patches in place, and those left inert under another wrapper."""
    with _lock:
        return list(_entries)


def installed(target: Any, name: str) -> Entry | None:
    """Our patch of ``target.name``, if one is in place."""
    return _held.get((id(target), name))


def owned(value: Any) -> Entry | None:
    """The entry whose replacement ``value`` is, if any (a wrapper chain's link that is ours)."""
    with _lock:
        return next((entry for entry in _entries if entry.replacement is value), None)


def _label(target: Any) -> str:
    if isinstance(target, types.ModuleType):
        return target.__name__
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


def where(patch: Patch) -> str:
    """``module.Class.name`` of the attribute ``patch`` replaces."""
    return f"{_label(patch.target)}.{patch.name}"


# -- making ours inert ----------------------------------------------------------------------


def inert(function: Any, original: Any) -> bool:
    """Turns our ``function`` into a pass-through to ``original`` in place (whoever holds it,
    another wrapper above it, now reaches the original unchanged): its code becomes a call of
    a keyword default. False when ``function`` is not a plain function."""
    if not isinstance(function, types.FunctionType) or original is ABSENT:
        return False
    function.__code__ = _passthrough(function.__code__)
    function.__defaults__ = None
    function.__kwdefaults__ = {MARK: original}
    return True


_KINDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _forwarding(flags: int, head: str, call: str) -> str:
    """``def head`` returning ``call``, of the kind ``flags`` give (plain, generator,
    coroutine or async generator): CPython 3.14 deprecates giving a function code of
    another kind, and each kind must also stay one for ``inspect`` and its callers."""
    kind = flags & _KINDS
    if kind & inspect.CO_COROUTINE:
        return f"async def {head}:\n    return await {call}\n"
    if kind & inspect.CO_ASYNC_GENERATOR:
        return f"async def {head}:\n    async for item in {call}:\n        yield item\n"
    if kind & inspect.CO_GENERATOR:
        return f"def {head}:\n    return (yield from {call})\n"
    return f"def {head}:\n    return {call}\n"


def _passthrough(replaced: types.CodeType) -> types.CodeType:
    """The code of ``def f(*args, __agenttape__=original, **kwargs)`` returning the call of
    the original, of the same kind as ``replaced`` and with its free variables (a function's
    code can only be replaced by code with as many)."""
    free = replaced.co_freevars
    body = _forwarding(
        replaced.co_flags, f"inner(*args, {MARK}=None, **kwargs)", f"{MARK}(*args, **kwargs)"
    )
    if free:
        # Read once so that the compiler makes them free variables of ``inner``.
        first, rest = body.split("\n", 1)
        body = f"{first}\n    if {MARK} is None:\n        ({', '.join(free)},)\n{rest}"
    source = "def outer():\n"
    if free:
        source += f"    {', '.join(free)} = {', '.join('None' for _ in free)}\n"
    source += "".join(f"    {line}\n" for line in body.splitlines()) + "    return inner\n"
    scope: dict[str, Any] = {}
    exec(compile(source, "<agenttape pass-through>", "exec"), scope)
    code: types.CodeType = scope["outer"]().__code__
    return code


# -- the techniques -------------------------------------------------------------------------


def wrap(target: Any, name: str, make: Callable[[Any], Any]) -> Patch:
    """A function calling the original: ``make(original)``."""
    return Patch(target, name, make)


def subclass(module: Any, name: str, namespace: Callable[[type], dict[str, Any]]) -> Patch:
    """The class ``module.name`` replaced by a subclass made with ``type()`` whose methods
    are ``namespace(original class)``, under the original's name."""
    return Patch(
        module,
        name,
        lambda base: type(base.__name__, (base,), namespace(base)),
        "subclass made with type()",
        expect=lambda value: isinstance(value, type),
    )


def forwarder(module: Any, name: str, stand_in: type, expected: Any) -> Patch:
    """``module.name`` (which must be ``expected``) replaced by ``stand_in(expected)``, an
    object whose ``__getattr__`` forwards what it does not define itself."""
    return Patch(
        module,
        name,
        stand_in,
        "__getattr__ forwarder",
        expect=lambda value: value is expected,
    )


def default(cls: type, name: str, value: Any) -> Patch:
    """A class attribute ``cls`` did not have: the default of per-connection state."""
    return Patch(
        cls, name, lambda original: value, "attribute added", expect=lambda _: False, new=True
    )


def redirect_code(module: Any, name: str, make: Callable[[Any], Any]) -> list[Patch]:
    """Makes the function ``module.name`` itself call ``make(a copy of it)``, by swapping its
    ``__code__``: code that took a reference to it before it was patched (``from m import f``)
    calls the replacement too. The call goes through ``module.__agenttape__``, a table by
    function name, looked up in the function's own globals."""
    function = getattr(module, name)
    if not isinstance(function, types.FunctionType) or function.__closure__ is not None:
        raise PatchError(f"{module.__name__}.{name} is not a plain function")
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    scope: dict[str, Any] = {}
    source = _forwarding(
        function.__code__.co_flags, f"{name}(*args, **kwargs)", f"{MARK}[{name!r}](*args, **kwargs)"
    )
    exec(compile(source, module.__name__, "exec"), scope)
    code = scope[name].__code__
    table = {name: make(copy)}
    swap: Technique = "__code__ swap"
    keep = _anything
    return [
        Patch(module, MARK, lambda found: table, swap, expect=lambda _: False, new=True),
        Patch(function, "__defaults__", lambda found: None, swap, expect=keep),
        Patch(function, "__kwdefaults__", lambda found: None, swap, expect=keep),
        Patch(function, "__code__", lambda found: code, swap, expect=keep),
    ]


def _anything(value: Any) -> bool:
    return True


def chain(value: Any) -> Iterator[Any]:
    """``value`` and what it wraps, link by link (``__wrapped__``, as functools and wrapt
    set it); a pass-through of ours leads on to its original."""
    seen: set[int] = set()
    while value is not None and id(value) not in seen:
        seen.add(id(value))
        yield value
        kwdefaults = getattr(value, "__kwdefaults__", None)
        if isinstance(value, types.FunctionType) and kwdefaults and MARK in kwdefaults:
            value = kwdefaults[MARK]
            continue
        try:
            value = getattr(value, "__wrapped__", None)
        except Exception:
            value = None


REACH_LIMIT = 64
"""How many callables ``reaches`` looks at from one attribute, at most."""


def reaches(value: Any) -> Iterator[Any]:
    """``value`` and the callables it may call on to: the ``chain`` links, and what a plain
    wrapper keeps its inner function in without saying so (no ``__wrapped__``): its
    closure, its defaults, the globals its code reads, a bound method's function, a
    ``functools.partial``'s. A wrapper someone put on ours this way still holds ours: it
    must not be taken for ours being gone, and be wrapped again."""
    seen: set[int] = set()
    todo = [value]
    while todo and len(seen) < REACH_LIMIT:
        current = todo.pop(0)
        for link in chain(current):
            if id(link) in seen:
                continue
            seen.add(id(link))
            yield link
            todo.extend(_held_by(link))


def _held_by(value: Any) -> list[Any]:
    """The callables ``value`` holds directly (``reaches``)."""
    held: list[Any] = []
    function = getattr(value, "__func__", None) if isinstance(value, types.MethodType) else value
    if isinstance(function, types.FunctionType):
        for cell in function.__closure__ or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        held.extend(function.__defaults__ or ())
        held.extend((function.__kwdefaults__ or {}).values())
        scope = function.__globals__
        held.extend(scope[name] for name in function.__code__.co_names if name in scope)
    elif isinstance(value, functools.partial):
        held.append(value.func)
    return [item for item in held if callable(item) and not isinstance(item, type)]
