"""Token counts the gateway gives before (or without) an upstream's own count: a documented estimate.

The estimate (:func:`turnout.core.estimate.estimate_tokens`: about four characters of text per token, plus a few
tokens per message) is close enough for a client that budgets its context (Claude Code, the Anthropic SDK's
``count_tokens``). Wherever
the gateway answers with this estimate it says so (``x-turnout-token-count: estimate``); the upstream's
own count is used whenever the served upstream has one.
"""

from __future__ import annotations

import logging

from aiohttp import web

from turnout.core.errors import ConfigError, InvalidRequest, ProviderError
from turnout.core.estimate import estimate_tokens
from turnout.core.types import ChatRequest
from turnout.gateway.anthropic_surface import AnthropicSurface
from turnout.gateway.bounds import header_value, parse_json, read_body
from turnout.gateway.exchange import Exchange, Host
from turnout.gateway.failures import RequestRejected, config_failure, invalid_request
from turnout.providers.base import HTTPAdapter

log = logging.getLogger("turnout.gateway")


async def serve_count_tokens(
    gw: Host, surface: AnthropicSurface, request: web.Request, ex: Exchange
) -> web.StreamResponse:
    """``POST /v1/messages/count_tokens``: the served upstream's own count, else the estimate.

    The body is a Messages request without ``max_tokens``. When the entry that would serve it is an
    Anthropic profile or a Vertex AI one (Claude's ``count-tokens:rawPredict``, Gemini's ``countTokens``), its
    count answers (``x-turnout-token-count: upstream``);
    otherwise, or when that call fails, the estimate above answers (``x-turnout-token-count: estimate``).
    """
    try:
        raw = parse_json(await read_body(request, gw.max_body_bytes))
        raw.setdefault("max_tokens", 1)
        call = surface.parse_object(raw, request.headers)
        assert ex.caller is not None  # the guard authenticated the request
        admitted = gw.access.admit(ex.caller, call.model)  # the same names, and the same routes, as chat
        target = gw.client.route(model=admitted.model, provider=admitted.provider, sender=admitted.sender)
    except RequestRejected as exc:
        return gw.error_response(surface, exc.failure)
    except ConfigError as exc:
        return gw.error_response(surface, config_failure(exc))
    entry = target.reliable.entries[0]
    model = entry.model_for(target.model)
    key = entry.keys.pick(gw.client.factory.env.clock())
    provider = entry.providers[key.index] if key is not None else None
    count, source = None, "estimate"
    if isinstance(provider, HTTPAdapter) and provider.counts_tokens:
        request_ = ChatRequest(messages=call.messages, tools=call.tools, native=call.native)
        try:
            count, source = await provider.count_tokens(request_, model), "upstream"
        except ProviderError:
            log.info("count_tokens on %s failed; answering with the estimate", entry.profile)
        except InvalidRequest as exc:  # nothing was sent: the request is the client's to fix
            return gw.error_response(surface, invalid_request(exc))
    if count is None:
        count = estimate_tokens(call.messages, call.tools)
    ex.provider, ex.model = entry.profile, model
    headers = {"x-turnout-token-count": source, "x-turnout-provider": header_value(entry.profile)}
    headers["x-turnout-model"] = header_value(model)
    return web.json_response({"input_tokens": count}, headers=headers)
