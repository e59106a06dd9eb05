"""``Recorder(..., otel=True)``: the OpenTelemetry span around a run names the run, so a trace
seen in Jaeger, Phoenix or Langfuse leads to the cassette that replays it."""

from __future__ import annotations

from typing import Any

from .._core.errors import AgentTapeError
from .run import Run

INSTALL_HINT = "otel=True needs opentelemetry-api: pip install 'agenttape-recorder[otel]'"


def require_api() -> None:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        raise AgentTapeError(INSTALL_HINT) from None


def annotate_current_span(run: Run, store: str) -> None:
    """Adds the run's id, outcome and place in the store to the span current where the run
    ended (the request's server span, typically); nothing when no span is recording."""
    from opentelemetry import trace

    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, Any] = {
        "agenttape.run_id": run.run_id,
        "agenttape.run.status": run.status or "",
        "agenttape.run.kept": bool(run.kept),
        "agenttape.store": store,
    }
    if run.kept:
        attributes["agenttape.run.path"] = run.path.as_posix()
        attributes["agenttape.fetch"] = (
            f"agenttape fetch {store} {run.run_id} cassettes/{run.run_id}.msgpack"
        )
    span.set_attributes(attributes)
