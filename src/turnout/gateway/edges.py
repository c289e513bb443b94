"""What every gateway response carries whatever its route: a request id, CORS, and JSON for unknown routes.

- ``request-id`` and ``x-request-id``: one id per request, made by the gateway (a client's own id is never
  echoed). A request that makes a call uses it as the call's id, so it is the ``call_id`` in the ledger.
- CORS is off unless ``[gateway] cors_origins`` names the origins a browser client may call from (``"*"``
  for any). An allowed origin gets ``Access-Control-Allow-Origin`` on every answer and a preflight
  (``OPTIONS``) answered 204; any other origin gets no CORS header, so the browser refuses the answer.
- A path the gateway does not serve is 404, and a known path with another method 405 (with ``Allow``),
  both in the JSON error shape of the surface the request speaks (Anthropic's with ``anthropic-version``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, MutableMapping

from aiohttp import web

from turnout.call import new_call_id
from turnout.gateway.wire import Failure

REQUEST_ID_KEY = web.RequestKey("turnout_request_id", str)
#: The headers a browser may read from an answer (besides the CORS-safelisted ones).
EXPOSED = "request-id, x-request-id, x-turnout-provider, x-turnout-model, x-turnout-attempts, x-turnout-fallback, "
EXPOSED += "x-turnout-call-id, x-turnout-token-count, retry-after"
ALLOWED_METHODS = "GET, POST, OPTIONS"
#: A preflight may ask for these header names only (tokens, bounded).
_HEADER_LIST = re.compile(r"[A-Za-z0-9\-]{1,64}(\s*,\s*[A-Za-z0-9\-]{1,64}){0,31}")
_DEFAULT_ALLOWED_HEADERS = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta"


def request_id(request: web.Request) -> str:
    """The id of ``request`` (made on first use and kept on the request)."""
    rid = request.get(REQUEST_ID_KEY)
    if rid is None:
        rid = request[REQUEST_ID_KEY] = new_call_id()
    return rid


class Edges:
    """Request ids and CORS for every response, and the answer for routes the gateway does not serve.

    Args:
        cors_origins: ``[gateway] cors_origins``.
        error_response: Renders a failure in the surface the request speaks.
    """

    def __init__(self, cors_origins: Iterable[str], error_response: Callable[[web.Request, Failure], web.Response]):
        origins = frozenset(cors_origins)
        self.any_origin = "*" in origins
        self.origins = origins - {"*"}
        self._error_response = error_response

    def allowed_origin(self, request: web.Request) -> str | None:
        """The request's ``Origin`` when CORS allows it, else None."""
        origin = request.headers.get("Origin")
        if origin is None or not (self.any_origin or origin in self.origins):
            return None
        return "*" if self.any_origin else origin

    def stamp(self, request: web.Request, response: web.StreamResponse, rid: str) -> web.StreamResponse:
        """Add the request id ``rid`` (and CORS headers for an allowed origin) to an answer not yet prepared.

        Every route calls it on each answer before its headers go out (a stream: before it is prepared). It
        is cheaper than aiohttp's ``on_response_prepare`` signal, which costs two coroutines per answer.
        """
        self.stamped(request, response.headers, rid)
        return response

    def stamped(self, request: web.Request, headers: MutableMapping[str, str], rid: str) -> MutableMapping[str, str]:
        """``headers`` with what :meth:`stamp` adds: for an answer made with them, one header copy fewer."""
        headers["request-id"] = rid
        headers["x-request-id"] = rid
        if self.any_origin or self.origins:
            origin = self.allowed_origin(request)
            if origin is not None:
                headers["Access-Control-Allow-Origin"] = origin
                headers["Access-Control-Expose-Headers"] = EXPOSED
                if origin != "*":
                    headers["Vary"] = "Origin"
        return headers

    async def fallback(self, request: web.Request) -> web.StreamResponse:
        """A preflight, a 405 for a known path with another method, or a 404."""
        return self.stamp(request, await self._fallback(request), request_id(request))

    async def _fallback(self, request: web.Request) -> web.StreamResponse:
        allowed = await _allowed_methods(request)
        if request.method == "OPTIONS" and self.allowed_origin(request) is not None:
            asked = request.headers.get("Access-Control-Request-Headers", "")
            allow_headers = asked if _HEADER_LIST.fullmatch(asked) else _DEFAULT_ALLOWED_HEADERS
            return web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Methods": ALLOWED_METHODS,
                    "Access-Control-Allow-Headers": allow_headers,
                    "Access-Control-Max-Age": "600",
                },
            )
        if allowed:
            response = self._error_response(
                request,
                Failure(
                    status=405,
                    kind="invalid_request",
                    message=f"method {request.method[:16]} is not allowed here; use {', '.join(sorted(allowed))}",
                    code="method_not_allowed",
                ),
            )
            response.headers["Allow"] = ", ".join(sorted(allowed))
            return response
        return self._error_response(
            request,
            Failure(status=404, kind="not_found", message="no such endpoint", code="unknown_url"),
        )


async def _allowed_methods(request: web.Request) -> set[str]:
    """The methods the gateway serves on ``request.path`` (empty for a path it does not serve at all)."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource.canonical == "/{tail}":
            continue
        _, methods = await resource.resolve(request)
        allowed |= methods
    allowed.discard("HEAD")
    return allowed
