"""``POST /v1/embeddings``: OpenAI's embeddings endpoint in front of the client's embedding walk.

The body is OpenAI's ``CreateEmbeddingRequest`` (``model``, ``input`` as a string, strings, a token array or token
arrays, ``encoding_format`` ``float`` or ``base64``, ``dimensions``, ``user``); any other field is refused (400),
never dropped. The answer is OpenAI's ``CreateEmbeddingResponse``: ``{"object": "list", "data": [{"object":
"embedding", "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``, ``model`` naming the
served model and the ``x-turnout-*`` headers the entry that served. ``base64`` is OpenAI's: each vector's
little-endian float32 bytes, base64-encoded.
"""

from __future__ import annotations

import base64
import sys
from array import array
from typing import Any

import orjson
from aiohttp import web

from turnout.core.embeddings import MAX_INPUTS, EmbedReply
from turnout.core.errors import ConfigError, TurnoutError
from turnout.gateway.access import Admitted
from turnout.gateway.bounds import attribution_headers, parse_json, read_body
from turnout.gateway.exchange import Exchange, Host
from turnout.gateway.failures import RequestRejected, invalid
from turnout.gateway.spend import Hold, embedding_worst_case
from turnout.gateway.surface import Surface

JSON = "application/json"
_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
_BIG_ENDIAN = sys.byteorder == "big"


def base64_vector(vector: list[float]) -> str:
    """A vector as OpenAI's ``base64`` encoding gives it: little-endian float32 bytes, base64-encoded."""
    packed = array("f", vector)
    if _BIG_ENDIAN:
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def parse_embedding_request(body: bytes) -> tuple[str, list[Any], bool, int | None, str | None]:
    """``(model, inputs, base64, dimensions, user)`` of a ``CreateEmbeddingRequest``.

    Raises:
        RequestRejected: 400 for a body that is not one (naming the field, never echoing its value).
    """
    data = parse_json(body)
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise invalid(f"unrecognized request argument: {unknown[0][:64]!r}", param=unknown[0][:64])
    model = data.get("model")
    if not isinstance(model, str):  # "" asks for the default route, as on /v1/chat/completions
        raise invalid("model is required and must be a string", param="model")
    raw = data.get("input")
    if isinstance(raw, str):
        inputs: list[Any] = [raw]
    elif isinstance(raw, list) and raw and all(type(t) is int for t in raw):
        inputs = [raw]  # one token array
    elif isinstance(raw, list) and raw:
        inputs = raw
    else:
        raise invalid("input must be a string, an array of strings, or token arrays, and not empty", param="input")
    if len(inputs) > MAX_INPUTS:
        raise invalid(f"input holds more than {MAX_INPUTS} items", param="input")
    encoding = data.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise invalid("encoding_format must be 'float' or 'base64'", param="encoding_format")
    dimensions = data.get("dimensions")
    if dimensions is not None and type(dimensions) is not int:
        raise invalid("dimensions must be an integer", param="dimensions")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("user must be a string", param="user")
    return model, inputs, encoding == "base64", dimensions, user


def embedding_body(reply: EmbedReply, as_base64: bool) -> bytes:
    """The ``CreateEmbeddingResponse`` of ``reply``."""
    if as_base64:
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": base64_vector(v)} for i, v in enumerate(reply.vectors)
        ]
    else:
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(reply.vectors)]
    tokens = reply.usage.input_tokens
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": reply.served.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


async def _reserve(gw: Host, admitted: Admitted, inputs: list[Any], ex: Exchange) -> Hold | None:
    """Reserve the worst case of a limited key's embedding call (see ``Access.reserve``)."""
    assert ex.caller is not None
    try:
        target = gw.client.route(model=admitted.model, provider=admitted.provider, sender=admitted.sender)
    except ConfigError:  # the call fails to route the same way, spending nothing
        return None
    return await gw.access.reserve(ex.caller, embedding_worst_case(target, inputs), ex.request_id)


async def serve_embeddings(gw: Host, surface: Surface, request: web.Request, ex: Exchange) -> web.StreamResponse:
    """Answer one ``POST /v1/embeddings``."""
    assert ex.caller is not None  # the guard authenticated the request
    try:
        body = await read_body(request, gw.max_body_bytes)
        model, inputs, as_base64, dimensions, user = parse_embedding_request(body)
        admitted = gw.access.admit(ex.caller, model)
        if ex.caller.limited:  # its worst case held before anything is sent, as a chat call's
            ex.hold = await _reserve(gw, admitted, inputs, ex)
    except RequestRejected as exc:
        return gw.error_response(surface, exc.failure)
    ex.route = model
    try:
        reply = await gw.client.embed(
            inputs,
            model=admitted.model,
            provider=admitted.provider,
            sender=admitted.sender,
            dimensions=dimensions,
            user=user,
            call_id=ex.request_id,
            caller=ex.caller.name,
        )
    except TurnoutError as exc:
        return gw.failure_response(surface, exc, ex)
    served = reply.served
    ex.provider, ex.model, ex.attempts, ex.call_id = served.provider, served.model, reply.attempts, reply.call_id
    ex.fallback = (reply.requested.provider, served.provider) if reply.fallback is not None else None
    headers = attribution_headers(
        served.provider,
        served.model,
        len(reply.attempts),
        reply.fallback.text if reply.fallback is not None else None,
        reply.call_id,
    )
    headers["Content-Type"] = JSON
    ex.stamped = True
    return web.Response(
        body=embedding_body(reply, as_base64), headers=gw.edges.stamped(request, headers, ex.request_id)
    )
