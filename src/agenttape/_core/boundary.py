"""``@agenttape.boundary("name")``: a function recorded and replayed like an HTTP call.

A tool that is not HTTP (a database query, a shell command) becomes one interaction of the
active cassette, with ``boundary="tool:<name>"``:

- request: method ``CALL``, URL ``tool://<name>``, and the arguments (bound to their parameter
  names) as a JSON body, so the ordinary matcher, ``ignore_json_fields`` and JSON redaction
  apply and a miss names the argument that changed (``body.user_id: expected …``);
- response: status 200 with the return value as JSON, or, when the function raised, status
  500 with the exception's ``args`` and a ``Failure(kind="raised", type="module:QualName",
  message=str(exc))``.

On replay the function body does not run. HTTP made inside a boundary while it records belongs
to the boundary and is not recorded separately (replay never runs the body to make it again).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

from . import json_values, runtime
from .exchange import Replay, begin, serving
from .models import Failure, Interaction, Request
from .tape import Recording

F = TypeVar("F", bound=Callable[..., Any])

PREFIX = "tool:"
_JSON_HEADERS = [("content-type", "application/json")]


def boundary(name: str) -> Callable[[F], F]:
    """Record and replay calls of the decorated function (sync or async) as ``tool:<name>``.

    Args:
        name: the boundary's name (``"lookup_order"`` or ``"tool:lookup_order"``), as
            ``live=`` and ``frozen=`` name it.

    Arguments and the return value (or the exception's arguments) must be msgpack-serialisable;
    anything else raises ``TypeError`` when the call is recorded.
    """
    if not isinstance(name, str) or not name.strip(" :"):
        raise ValueError(f"boundary needs a name, such as boundary('lookup_order'); got {name!r}")
    bare = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    label = PREFIX + bare

    def decorate(function: F) -> F:
        call = _Call(bare, label, function)
        if inspect.iscoroutinefunction(function):
            return _async_wrapper(call, function, label)  # type: ignore[return-value]
        return _sync_wrapper(call, function, label)  # type: ignore[return-value]

    return decorate


def _sync_wrapper(call: _Call, function: Callable[..., Any], label: str) -> Callable[..., Any]:
    """``function`` run live (no tape, or arguments the boundary leaves alone), replayed, or
    run and recorded."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        request = call.request(args, kwargs) if tape is not None else None
        if tape is None or request is None:
            return function(*args, **kwargs)

        plan = begin(tape, request, label)
        with serving(tape, plan, _not_recorded):
            if isinstance(plan, Replay):
                return call.replay(plan.interaction)
            try:
                result = function(*args, **kwargs)
            except Exception as exc:
                call.raised(plan.recording, exc)
                raise
            call.returned(plan.recording, result)
            return result

    return run


def _async_wrapper(call: _Call, function: Callable[..., Any], label: str) -> Callable[..., Any]:
    """``_sync_wrapper`` for a coroutine function: the call awaited when run live."""

    @functools.wraps(function)
    async def run_async(*args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        request = call.request(args, kwargs) if tape is not None else None
        if tape is None or request is None:
            return await function(*args, **kwargs)

        plan = begin(tape, request, label)
        with serving(tape, plan, _not_recorded):
            if isinstance(plan, Replay):
                return call.replay(plan.interaction)
            try:
                result = await function(*args, **kwargs)
            except Exception as exc:
                call.raised(plan.recording, exc)
                raise
            call.returned(plan.recording, result)
            return result

    return run_async


def _not_recorded(exc: BaseException) -> None:
    """An exception that is not the function's own (an interrupt) is not written down."""
    return None


class _Call:
    """What a boundary knows about its function: name, label and signature."""

    __slots__ = ("label", "name", "signature", "skip_first", "url")

    def __init__(self, name: str, label: str, function: Callable[..., Any]) -> None:
        self.name = name
        self.label = label
        self.url = f"tool://{quote(name, safe='')}"
        try:
            self.signature: inspect.Signature | None = inspect.signature(function)
        except (TypeError, ValueError):
            self.signature = None  # a callable without one: record positions and keywords
        parameters = self.signature.parameters if self.signature is not None else {}
        # A method's instance is not an input of the call: leave it out of the record.
        self.skip_first = next(iter(parameters), None) in ("self", "cls")

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request | None:
        """The call as a request, or None to just call the function (arguments the function
        itself will reject)."""
        if self.signature is None:
            arguments: list[tuple[str, Any]] = [("args", args), ("kwargs", kwargs)]
        else:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError:
                return None
            arguments = list(bound.arguments.items())
        if self.skip_first and arguments:
            arguments = arguments[1:]
        document = {
            parameter: json_values.to_json(value, f"boundary {self.name!r}: argument {parameter!r}")
            for parameter, value in arguments
        }
        return Request("CALL", self.url, list(_JSON_HEADERS), json_values.dumps(document))

    def returned(self, plan: Recording, result: Any) -> None:
        body = json_values.dumps(
            json_values.to_json(result, f"boundary {self.name!r}: return value")
        )
        plan.respond(200, "Returned", "", list(_JSON_HEADERS))
        plan.chunk(body)
        plan.finish()

    def raised(self, plan: Recording, exc: Exception) -> None:
        kind = type(exc)
        try:
            document: dict[str, Any] = {"args": json_values.to_json(list(exc.args), "")}
        except TypeError:
            document = {}  # arguments of the exception that a cassette cannot hold
        plan.interaction.error = Failure(
            kind="raised", type=f"{kind.__module__}:{kind.__qualname__}", message=str(exc)
        )
        plan.respond(500, "Raised", "", list(_JSON_HEADERS))
        plan.chunk(json_values.dumps(document))
        plan.finish()

    def replay(self, interaction: Interaction) -> Any:
        if interaction.error is not None:
            raise _rebuild(interaction)
        response = interaction.response
        assert response is not None
        return json_values.loads(response.body)


def _rebuild(interaction: Interaction) -> Exception:
    """The recorded exception: same class, same message (and same args when they were kept)."""
    error = interaction.error
    assert error is not None
    exception_class = _exception_class(error.type)
    args: list[Any] | None = None
    if interaction.response is not None and interaction.response.body:
        document = json_values.loads(interaction.response.body)
        if isinstance(document, dict) and isinstance(document.get("args"), list):
            args = document["args"]
    try:
        exception = exception_class(*(args if args is not None else [error.message]))
        if str(exception) == error.message:
            return exception
    except Exception:
        pass
    exception = exception_class.__new__(exception_class)
    exception.args = tuple(args) if args is not None else (error.message,)
    return exception


def _exception_class(qualified: str) -> type[Exception]:
    """The class named ``module:QualName``, looked up among modules already imported: reading
    a cassette never imports (never runs) anything, and the code that raised it the first time
    has imported its module by the time it is replayed."""
    module_name, _, qualname = qualified.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    # Defined where it cannot be found again (inside a function): a stand-in of that name.
    return type(qualname.rsplit(".", 1)[-1], (Exception,), {"__module__": module_name})
