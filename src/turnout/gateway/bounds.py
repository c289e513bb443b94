"""The bounds of what a client sends on the wire: body size, integers, string lengths, and header encoding.

Each surface (OpenAI, Anthropic, Responses, embeddings) reads its body once, with :func:`read_body` (bounded in
size) and :func:`parse_json` (bounded in depth and integers), and bounds its fields with :data:`MAX_MODEL_CHARS`
and :data:`MAX_FIELD_CHARS`; any string that may reach a response header (the attribution headers of
:func:`attribution_headers` too) is encoded by :func:`header_value`. The status of a request out of bounds is
:mod:`turnout.gateway.failures`' to give.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web
from pydantic import ValidationError

from turnout.core.arguments import MAX_JSON_DEPTH, too_deep
from turnout.gateway.failures import RequestRejected, invalid, too_large

#: The longest ``model`` a client may send, and the longest other string that can reach a header, a metric
#: label, a log line or the ledger (a sender id, a tool name): each surface bounds its fields with these.
MAX_MODEL_CHARS = 256
MAX_FIELD_CHARS = 400

_ATTR_CHARS = "!#$&+-.^_`|~"  # RFC 8187 attr-char, besides ALPHA and DIGIT


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body (each surface parses it with :func:`parse_json`).

    Raises:
        RequestRejected: 413 beyond ``limit`` bytes (checked before reading).
    """
    length = request.content_length
    if length is not None and length > limit:
        raise RequestRejected(too_large(limit))
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestRejected(too_large(limit)) from None


def parse_json(body: bytes) -> Any:
    """The request body as JSON: a 400 when it is not a JSON object, too deep, or holds a number out of range.

    The parser takes 1024 levels and the encoder 254: a body in between would parse, then fail as it is encoded
    for the upstream, inside the walk. The gateway accepts only what it can encode: at most
    :data:`~turnout.core.arguments.MAX_JSON_DEPTH` levels, anywhere in the body (``metadata``, a tool's schema, a
    response format), for every surface. Numbers are bounded by :func:`_beyond_int64`; the parser itself refuses
    ``NaN``, ``Infinity`` and a number too large for a double, as invalid JSON.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise invalid("invalid request body: Invalid JSON") from None
    if not isinstance(data, dict):
        raise invalid("invalid request body: a JSON object is expected")
    if too_deep(body):
        raise invalid(f"invalid request body: JSON nested deeper than {MAX_JSON_DEPTH} levels", code="json_too_deep")
    if _beyond_int64(data):
        raise invalid("the request holds an integer outside the signed 64-bit range", code="integer_out_of_range")
    return data


_I64 = 2**63


def _beyond_int64(value: object) -> bool:
    """Whether ``value`` holds, at any depth (a tool schema too), an integer outside the signed 64-bit range.

    Such an integer cannot be sent on: most upstreams refuse it. orjson reads an integer beyond 64 bits as a float,
    changing its value (``-2**63 - 1`` becomes ``-2.0**63``), so a float of magnitude 2**63 or more, which cannot
    be told from one, is refused too. A list of numbers only (a token array, thousands long) is answered at once
    by its largest magnitude.
    """
    if type(value) is dict:
        return any(type(v) is not str and _beyond_int64(v) for v in value.values())
    if type(value) is list:
        try:
            if max(map(abs, value), default=0) < _I64:
                return False
        except TypeError:  # not numbers only: each item is looked at
            pass
        return any(type(v) is not str and _beyond_int64(v) for v in value)
    if type(value) is int:
        return not -_I64 <= value < _I64
    if type(value) is float:
        return abs(value) >= _I64
    return False


_UNION_TAGS = frozenset(("str", "int", "float", "bool", "dict", "list", "none"))


def _path(loc: tuple[int | str, ...]) -> str:
    """``messages.0.content`` from a pydantic location, without union-member tags (``str``, ``_Part``, ``list[…]``)."""
    keep = (
        str(p)
        for p in loc
        if not (isinstance(p, str) and (p in _UNION_TAGS or p.startswith("_") or "[" in p or "(" in p))
    )
    return ".".join(keep)


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """A content-free message for a pydantic error (field paths and reasons, never the values sent)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    reasons = []
    for e in errors[:3]:
        loc = _path(e["loc"])
        reasons.append(f"{loc}: {e['msg']}" if loc else e["msg"])
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    param = _path(errors[0]["loc"]) if errors else ""
    return "invalid request body: " + "; ".join(reasons) + more, param or None


def header_value(text: str) -> str:
    """``text`` as a header value: as is when it is printable ASCII, else RFC 8187 (``UTF-8''%E2%9A%A1…``).

    Headers are latin-1 on the wire; the fallback notice starts with ⚡ and a model name may come from the
    caller, so anything outside printable ASCII (including CR/LF) is percent-encoded.
    """
    if text.isascii() and text.isprintable():
        return text
    return "UTF-8''" + quote(text, safe=_ATTR_CHARS)


def attribution_headers(
    provider: str, model: str, attempts: int, notice: str | None, call_id: str | None
) -> dict[str, str]:
    """The ``x-turnout-*`` headers naming the entry that produced the answer."""
    headers = {
        "x-turnout-provider": header_value(provider),
        "x-turnout-model": header_value(model),
        "x-turnout-attempts": str(attempts),
    }
    if notice is not None:
        headers["x-turnout-fallback"] = header_value(notice)
    if call_id is not None:
        headers["x-turnout-call-id"] = call_id
    return headers
