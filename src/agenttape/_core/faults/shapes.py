"""The error answers a fault gives, in each provider's own shape (body, status, headers), so
the provider's SDK raises the exception it raises in production and its retries run as they
do there.

The shapes are the ones the SDKs parse: the OpenAI SDK reads ``error.code`` and
``retry-after``; the Anthropic SDK picks its class from the status (529 is
``OverloadedError``) and keeps the body; google-genai reads ``error.code``/``status``/
``message``; botocore reads the error code from ``x-amzn-ErrorType``; Mistral's SDK keeps the
body of any 4xx/5xx, and Cohere's picks its class from the status.
"""

from __future__ import annotations

import email.utils
import json
import time
import uuid
from typing import Literal, get_args
from urllib.parse import urlsplit

from ..models import Headers, Request

Provider = Literal["openai", "anthropic", "google", "bedrock", "mistral", "cohere", "json"]
"""Whose shape an injected error takes; ``json`` is a plain JSON API's."""

PROVIDERS: tuple[Provider, ...] = get_args(Provider)

ErrorKind = Literal["rate_limit", "overloaded", "server_error", "status"]

_HOSTS: tuple[tuple[str, Provider], ...] = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "openai"),
    ("api.anthropic.com", "anthropic"),
    (".googleapis.com", "google"),
    ("api.mistral.ai", "mistral"),
    ("api.cohere.com", "cohere"),
    ("api.cohere.ai", "cohere"),
    (".amazonaws.com", "bedrock"),
)
"""Host (or host suffix) to provider: a request to one of these is answered in its shape."""

REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Site Overloaded",
}


def provider_of(request: Request) -> Provider:
    """Whose API ``request`` went to: by host, else (a gateway, a local stand-in) by what the
    SDK put in the request (its user agent and headers), else by the path."""
    host = (urlsplit(request.url).hostname or "").lower()
    for known, provider in _HOSTS:
        if (
            host == known
            or (known.startswith(".") and host.endswith(known))
            or (not known.startswith(".") and host.endswith("." + known))
        ):
            return provider
    agent = (request.header("user-agent") or "").lower()
    if request.header("anthropic-version") is not None or agent.startswith("anthropic"):
        return "anthropic"
    if request.header("x-stainless-lang") is not None or agent.startswith("openai"):
        return "openai"
    if (
        request.header("x-goog-api-client") is not None
        or request.header("x-goog-api-key") is not None
        or "google-genai" in agent
    ):
        return "google"
    if (
        request.header("x-amz-date") is not None
        or (request.header("authorization") or "").startswith("AWS4-HMAC-SHA256")
        or "botocore" in agent
    ):
        return "bedrock"
    if "mistral" in agent:
        return "mistral"
    if (request.header("x-fern-sdk-name") or "").lower() == "cohere":
        return "cohere"
    return _provider_of_path(urlsplit(request.url).path)


def _provider_of_path(path: str) -> Provider:
    if path.endswith("/messages") or "/v1/messages" in path:
        return "anthropic"
    if ":generatecontent" in path.lower() or ":streamgeneratecontent" in path.lower():
        return "google"
    if path.startswith("/model/") and path.rsplit("/", 1)[-1] in (
        "converse",
        "converse-stream",
        "invoke",
        "invoke-with-response-stream",
    ):
        return "bedrock"
    if path.startswith("/v2/chat") or path.startswith("/v2/embed") or path.startswith("/v2/rerank"):
        return "cohere"
    if any(
        part in path for part in ("/chat/completions", "/completions", "/responses", "/embeddings")
    ):
        return "openai"
    return "json"


def error_status(kind: ErrorKind, provider: Provider, status: int | None) -> int:
    """The status the provider answers ``kind`` with (``status`` when one was given)."""
    if status is not None:
        return status
    if kind == "rate_limit":
        return 429
    if kind == "overloaded":
        return 529 if provider == "anthropic" else 503
    return 500


def error_answer(
    kind: ErrorKind, provider: Provider, status: int, retry_after: float | None
) -> tuple[str, Headers, bytes]:
    """(reason, headers, body) of the error ``provider`` answers with ``status``: its body
    shape, its content type, its request id header, and for a rate limit its rate-limit
    headers; ``retry-after`` when ``retry_after`` is given."""
    reason = REASONS.get(status, "Error")
    headers: list[tuple[str, str]] = [("date", email.utils.formatdate(usegmt=True))]
    body = _BODIES[provider](kind, status, retry_after)
    own = _HEADERS[provider](kind, status, retry_after)
    if not any(name.lower() == "content-type" for name, _value in own):
        headers.append(("content-type", "application/json"))
    headers.extend(own)
    if retry_after is not None:
        headers.append(("retry-after", _seconds(retry_after)))
    headers.append(("content-length", str(len(body))))
    return reason, headers, body


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _dump(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _openai_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    if status == 429:
        wait = f"{_seconds(retry_after)}s" if retry_after is not None else "20ms"
        message = (
            "Rate limit reached for requests in organization org-agenttape on requests per min "
            f"(RPM): Limit 500, Used 500, Requested 1. Please try again in {wait}. Visit "
            "https://platform.openai.com/account/rate-limits to learn more."
        )
        error = {"message": message, "type": "requests", "param": None}
        return _dump({"error": {**error, "code": "rate_limit_exceeded"}})
    if status == 503:
        message = "The server is overloaded or not ready yet."
    elif status >= 500:
        message = (
            "The server had an error while processing your request. Sorry about that! "
            "(injected by agenttape)"
        )
    else:
        message = f"{REASONS.get(status, 'Error')} (injected by agenttape)"
    error_type = "server_error" if status >= 500 else "invalid_request_error"
    return _dump({"error": {"message": message, "type": error_type, "param": None, "code": None}})


def _openai_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    headers = [("x-request-id", f"req_{uuid.uuid4().hex}")]
    if status == 429:
        reset = f"{_seconds(retry_after)}s" if retry_after is not None else "20ms"
        headers += [
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", reset),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "29000"),
            ("x-ratelimit-reset-tokens", "2s"),
        ]
    return headers


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _anthropic_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    error_type = _ANTHROPIC_TYPES.get(
        status, "api_error" if status >= 500 else "invalid_request_error"
    )
    messages = {
        "rate_limit_error": "This request would exceed the rate limit for your organization "
        "of 50 requests per minute. (injected by agenttape)",
        "overloaded_error": "Overloaded",
        "api_error": "Internal server error",
    }
    message = messages.get(error_type, f"{REASONS.get(status, 'Error')} (injected by agenttape)")
    return _dump(
        {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": f"req_{uuid.uuid4().hex[:24]}",
        }
    )


def _anthropic_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    headers = [("request-id", f"req_{uuid.uuid4().hex[:24]}"), ("x-should-retry", "true")]
    if status not in (408, 409, 429) and status < 500:
        headers = headers[:1]
    if status == 429:
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + (retry_after or 1)))
        headers += [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", reset),
        ]
    return headers


_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _google_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    name = _GOOGLE_STATUSES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    messages = {
        "RESOURCE_EXHAUSTED": "Resource has been exhausted (e.g. check quota).",
        "UNAVAILABLE": "The model is overloaded. Please try again later.",
        "INTERNAL": "An internal error has occurred. Please retry or report in "
        "https://developers.generativeai.google/guide/troubleshooting",
    }
    error: dict[str, object] = {
        "code": status,
        "message": messages.get(name, f"{REASONS.get(status, 'Error')} (injected by agenttape)"),
        "status": name,
    }
    if retry_after is not None:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{_seconds(retry_after)}s",
            }
        ]
    return _dump({"error": error})


def _google_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    return [
        ("content-type", "application/json; charset=UTF-8"),
        ("server", "scaffolding on HTTPServer2"),
    ]


_AWS_ERRORS = {
    400: ("ValidationException", "The provided request is not valid. (injected by agenttape)"),
    403: (
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ),
    404: ("ResourceNotFoundException", "The specified resource was not found."),
    408: ("ModelTimeoutException", "Model has timed out in processing the request."),
    424: ("ModelErrorException", "The model returned an error."),
    429: ("ThrottlingException", "Too many requests, please wait before trying again."),
    500: ("InternalServerException", "The server encountered an internal error."),
    503: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
}


def _aws_error(status: int) -> tuple[str, str]:
    return _AWS_ERRORS.get(
        status,
        ("InternalServerException", "The server encountered an internal error.")
        if status >= 500
        else ("ValidationException", f"{REASONS.get(status, 'Error')} (injected by agenttape)"),
    )


def _bedrock_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    return _dump({"message": _aws_error(status)[1]})


def _bedrock_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    return [
        ("x-amzn-RequestId", str(uuid.uuid4())),
        (
            "x-amzn-ErrorType",
            f"{_aws_error(status)[0]}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        ),
    ]


def _mistral_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    if status == 429:
        error = {"message": "Requests rate limit exceeded", "type": "rate_limited", "code": "1300"}
    elif status == 503:
        error = {
            "message": "Service tier capacity exceeded for this model.",
            "type": "service_tier_capacity_exceeded",
            "code": "3505",
        }
    elif status >= 500:
        error = {
            "message": "Internal server error",
            "type": "internal_server_error",
            "code": "3000",
        }
    else:
        error = {
            "message": f"{REASONS.get(status, 'Error')} (injected by agenttape)",
            "type": "invalid_request_error",
            "code": "3001",
        }
    return _dump(
        {
            "object": "error",
            "message": error["message"],
            "type": error["type"],
            "param": None,
            "code": error["code"],
        }
    )


def _mistral_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    headers = [("mistral-correlation-id", str(uuid.uuid4()))]
    if status == 429:
        headers += [
            ("ratelimitbysize-limit", "500000"),
            ("ratelimitbysize-remaining", "0"),
            ("ratelimitbysize-reset", _seconds(retry_after or 1)),
        ]
    return headers


def _cohere_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    messages = {
        429: "You are past the rate limit for this API key. (injected by agenttape)",
        503: "Service unavailable, please try again later.",
    }
    message = messages.get(
        status,
        "internal server error, this has been reported to our developers"
        if status >= 500
        else f"{REASONS.get(status, 'Error')} (injected by agenttape)",
    )
    return _dump({"id": str(uuid.uuid4()), "message": message})


def _cohere_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    return [("x-debug-trace-id", uuid.uuid4().hex)]


def _json_body(kind: ErrorKind, status: int, retry_after: float | None) -> bytes:
    return _dump(
        {
            "error": {
                "status": status,
                "message": f"{REASONS.get(status, 'Error')} (injected by agenttape)",
            }
        }
    )


def _json_headers(kind: ErrorKind, status: int, retry_after: float | None) -> Headers:
    return [("x-request-id", str(uuid.uuid4()))]


_BODIES = {
    "openai": _openai_body,
    "anthropic": _anthropic_body,
    "google": _google_body,
    "bedrock": _bedrock_body,
    "mistral": _mistral_body,
    "cohere": _cohere_body,
    "json": _json_body,
}
_HEADERS = {
    "openai": _openai_headers,
    "anthropic": _anthropic_headers,
    "google": _google_headers,
    "bedrock": _bedrock_headers,
    "mistral": _mistral_headers,
    "cohere": _cohere_headers,
    "json": _json_headers,
}
