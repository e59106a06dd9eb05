"""A run as OpenTelemetry spans in OTLP/JSON, so it opens in the tracing tools a team already
watches (Jaeger, Phoenix, Langfuse, any OTLP backend).

One trace per cassette: a root span for the run, and a child span per interaction — an HTTP
client span, named and attributed as a GenAI call when it is one, or an ``execute_tool`` span
for a function boundary. Attribute names follow the OpenTelemetry semantic conventions at
``SEMCONV_VERSION``; the GenAI ones are still in development there, so the version is pinned
and written into every document as its schema URL.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from typing import Any

from .._core.errors import AgentTapeError
from .._core.models import Interaction
from .._core.urls import parse_url
from .._version import __version__
from .export import dumps, finite
from .reading import decode_within_budget, is_sse, parse_json, parse_sse

SEMCONV_VERSION = "1.37.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

# Span kinds and status codes as OTLP numbers them.
INTERNAL, CLIENT = 1, 3
STATUS_OK, STATUS_ERROR = 1, 2

PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
}
OPERATIONS = {
    "chat.completions": "chat",
    "messages": "chat",
    "responses": "chat",
    "generateContent": "generate_content",
    "streamGenerateContent": "generate_content",
    "converse": "chat",
    "converse-stream": "chat",
    "embeddings": "embeddings",
    "embedContent": "embeddings",
    "batchEmbedContents": "embeddings",
    "completions": "text_completion",
}
# Responses bigger than this are not read for usage figures: attributes, not bodies.
MAX_READ = 8 * 1024 * 1024
_HEX_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def _value(value: Any) -> dict[str, Any]:
    """An OTLP AnyValue: scalars as themselves, anything else as its JSON text."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": finite(value)}  # NaN as "NaN", as proto3's JSON mapping says
    if isinstance(value, str):
        return {"stringValue": value}
    return {"stringValue": json.dumps(finite(value), default=str, sort_keys=True)}


def _attributes(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"key": key, "value": _value(value)} for key, value in pairs.items() if value is not None
    ]


def _nanos(seconds: float) -> str:
    return str(round(seconds * 1_000_000_000))


def trace_id_of(run_id: str) -> str:
    """A run id of 32 hex digits is the trace id itself, so the two can be searched for by one
    string; any other run id is hashed to one."""
    if _HEX_TRACE_ID.fullmatch(run_id) and run_id.strip("0"):
        return run_id
    return hashlib.sha256(run_id.encode()).hexdigest()[:32]


def _span_id(run_id: str, index: int) -> str:
    return hashlib.sha256(f"{run_id}/{index}".encode()).hexdigest()[:16]


def _usage(interaction: Interaction) -> dict[str, Any]:
    """Response model, id, finish reasons and token counts, wherever the provider put them
    (a JSON body, or the events of a stream)."""
    response = interaction.response
    if response is None or not response.body or len(response.body) > MAX_READ:
        return {}
    decoded = decode_within_budget(response.headers, response.body).data
    if is_sse(response.headers):
        documents = [event.data for event in parse_sse(decoded)]
    else:
        ok, document = parse_json(decoded)
        documents = [document] if ok else []
    found: dict[str, Any] = {}
    reasons: list[str] = []
    for document in documents:
        if not isinstance(document, dict):
            continue
        for part in (document, document.get("message"), document.get("response")):
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("model"), str):
                found["gen_ai.response.model"] = part["model"]
            if isinstance(part.get("id"), str):
                found["gen_ai.response.id"] = part["id"]
            usage = part.get("usage") or part.get("usageMetadata")
            if isinstance(usage, dict):
                for key, name in (
                    ("prompt_tokens", "gen_ai.usage.input_tokens"),
                    ("input_tokens", "gen_ai.usage.input_tokens"),
                    ("promptTokenCount", "gen_ai.usage.input_tokens"),
                    ("completion_tokens", "gen_ai.usage.output_tokens"),
                    ("output_tokens", "gen_ai.usage.output_tokens"),
                    ("candidatesTokenCount", "gen_ai.usage.output_tokens"),
                ):
                    if isinstance(usage.get(key), int) and not isinstance(usage[key], bool):
                        found[name] = usage[key]
            for reason in _finish_reasons(part):
                if reason not in reasons:
                    reasons.append(reason)
    if reasons:
        found["gen_ai.response.finish_reasons"] = reasons
    return found


def _finish_reasons(part: dict[str, Any]) -> list[str]:
    reasons = []
    for choice in part.get("choices") or []:
        if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
            reasons.append(choice["finish_reason"])
    delta = part.get("delta")
    for holder in (part, delta if isinstance(delta, dict) else {}):
        if isinstance(holder.get("stop_reason"), str):
            reasons.append(holder["stop_reason"])
    return reasons


def _interaction_span(interaction: Interaction) -> tuple[str, int, dict[str, Any]]:
    """Name, kind and attributes of one interaction's span."""
    request = interaction.request
    if interaction.boundary != "http":
        name = interaction.boundary.split(":", 1)[-1]
        return (
            f"execute_tool {name}",
            INTERNAL,
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
        )
    url = parse_url(request.url)
    attributes: dict[str, Any] = {
        "http.request.method": request.method,
        "url.full": request.url,
        "server.address": url.host,
        "server.port": url.port,
    }
    if interaction.response is not None:
        attributes["http.response.status_code"] = interaction.response.status
    name = request.method
    llm = interaction.llm
    if llm is not None:
        operation = OPERATIONS.get(llm.api, llm.api)
        attributes |= {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDERS.get(llm.provider, llm.provider),
            "gen_ai.request.model": llm.model,
            "gen_ai.request.temperature": _float(llm.temperature),
            "gen_ai.request.top_p": _float(llm.top_p),
            "gen_ai.request.seed": llm.seed,
            "gen_ai.request.max_tokens": llm.max_tokens,
        }
        attributes |= _usage(interaction)
        name = f"{operation} {llm.model}" if llm.model else operation
    return name, CLIENT, attributes


def _status(interaction: Interaction) -> tuple[dict[str, Any], str | None]:
    """The span status, and the ``error.type`` attribute when the call failed."""
    error, response = interaction.error, interaction.response
    if error is not None:
        return {"code": STATUS_ERROR, "message": f"{error.type}: {error.message}"}, error.type
    if response is not None and response.status >= 400:
        return {"code": STATUS_ERROR, "message": f"HTTP {response.status}"}, str(response.status)
    return {"code": STATUS_OK}, None


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def to_otlp(header: dict[str, Any], interactions: list[Interaction]) -> dict[str, Any]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` holding the cassette as one trace."""
    run_id = str(header.get("run_id") or "")
    spans, first, last = _exchange_spans(run_id, interactions)
    root = _root_span(header, run_id, first, last)
    tags = _mapping(header.get("tags"))
    resource = {
        "service.name": str(tags.get("service") or "agenttape"),
        "telemetry.sdk.name": "agenttape",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": __version__,
    }
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource)},
                "scopeSpans": [
                    {
                        "scope": {"name": "agenttape", "version": __version__},
                        "spans": [root, *spans],
                        "schemaUrl": SCHEMA_URL,
                    }
                ],
                "schemaUrl": SCHEMA_URL,
            }
        ]
    }


def _exchange_spans(
    run_id: str, interactions: list[Interaction]
) -> tuple[list[dict[str, Any]], float | None, float | None]:
    """A span per exchange, children of the run's; and when the first started and the last
    ended (None without exchanges)."""
    trace_id = trace_id_of(run_id)
    root_id = _span_id(run_id, -1)
    spans = []
    first, last = None, None
    for index, interaction in enumerate(interactions):
        name, kind, attributes = _interaction_span(interaction)
        status, error_type = _status(interaction)
        if error_type is not None:
            attributes["error.type"] = error_type
        start = interaction.started_at
        end = start + (interaction.duration or 0.0)
        first = start if first is None else min(first, start)
        last = end if last is None else max(last, end)
        spans.append(
            {
                "traceId": trace_id,
                "spanId": _span_id(run_id, index),
                "parentSpanId": root_id,
                "name": name,
                "kind": kind,
                "startTimeUnixNano": _nanos(start),
                "endTimeUnixNano": _nanos(end),
                "attributes": _attributes({**attributes, "agenttape.interaction": index}),
                "status": status,
            }
        )
    return spans, first, last


def _root_span(
    header: dict[str, Any], run_id: str, first: float | None, last: float | None
) -> dict[str, Any]:
    """The run's span: from its first exchange (or its creation) to its last exchange's end
    or its recorded duration, whichever is later; an error when it raised or failed."""
    summary = _mapping(header.get("run"))
    created = header.get("created_at")
    start = first if first is not None else (created.timestamp() if created else 0.0)
    duration = summary.get("duration")
    end = max(last or start, start + duration if isinstance(duration, (int, float)) else start)
    run_status = summary.get("status")
    failed = run_status in ("raised", "failed")
    root_attributes: dict[str, Any] = {
        "agenttape.run_id": run_id,
        "agenttape.run.status": run_status,
        "agenttape.run.reasons": summary.get("reasons") or None,
    }
    tags = _mapping(header.get("tags"))
    root_attributes |= {f"agenttape.tag.{key}": value for key, value in tags.items()}
    return {
        "traceId": trace_id_of(run_id),
        "spanId": _span_id(run_id, -1),
        "name": "agenttape run",
        "kind": INTERNAL,
        "startTimeUnixNano": _nanos(start),
        "endTimeUnixNano": _nanos(end),
        "attributes": _attributes(root_attributes),
        "status": (
            {"code": STATUS_ERROR, "message": "; ".join(summary.get("reasons") or [])}
            if failed
            else {"code": STATUS_OK}
        ),
    }


def send(document: dict[str, Any], endpoint: str) -> str:
    """POSTs the document to an OTLP/HTTP receiver's traces path; the URL it went to."""
    url = endpoint.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    if not url.startswith(("http://", "https://")):
        raise AgentTapeError(f"endpoint {endpoint!r} is not an http:// or https:// URL")
    request = urllib.request.Request(
        url,
        data=dumps(document).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace").strip()
        raise AgentTapeError(f"the receiver at {url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AgentTapeError(f"could not send to {url}: {reason}") from None
    return url
