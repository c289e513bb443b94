"""What every gateway response carries whatever its route: a request id, CORS, and JSON for unknown routes.

- ``request-id`` and ``x-request-id``: one id per request, made by the gateway (a client's own id is never
  echoed). A request that makes a call uses it as the call's id, so it is the ``call_id`` in the ledger.
- CORS is off unless ``[gateway] cors_origins`` names the origins a browser client may call from (``"*"``
  for any). An allowed origin gets ``Access-Control-Allow-Origin`` on every answer and a preflight
  (``OPTIONS``) answered 204; any other origin gets no CORS header, so the browser refuses the answer.
- A path the gateway does not serve is 404, and a known path with another method 405 (with ``Allow``),
  both in the JSON error shape of the surface the request speaks (Anthropic's with ``anthropic-version``).

Browsers (:meth:`Edges.refusal`, before the key is checked and before any work): a web page may send a request to
any address without asking first (a "simple" request: a form's content type, no custom header), and a DNS-rebinding
page can even read the answer, under a name of its own that resolves to the gateway. So on every route that spends
or reads state (all but ``/health``, the CORS preflight and unknown paths):

- the ``Host`` header must name the gateway: ``localhost``, ``127.0.0.1``, ``::1``, the address it is bound to, or
  a name in ``[gateway] allowed_hosts`` (``"*"``: any); else 421 ``unknown_host``;
- a request a browser marks as from another site (``Sec-Fetch-Site: cross-site`` or ``same-site``), or whose
  ``Origin`` is neither the gateway's own nor one ``[gateway] cors_origins`` allows, is 403 ``cross_site``;
- a JSON route's body must say it is JSON (``application/json``, or a ``+json`` type): anything else, a form or
  ``text/plain`` included, is 415 ``unsupported_media_type``.

Each refusal is in the surface's error shape, logged (a warning with the refused value, bounded and escaped) and
counted (``turnout_gateway_refused_total{reason}``). Clients outside a browser (the SDKs, curl with a JSON body) send
none of these headers and pass.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, MutableMapping
from urllib.parse import urlsplit

from aiohttp import web

from turnout.call import new_call_id
from turnout.gateway.failures import Failure

REQUEST_ID_KEY = web.RequestKey("turnout_request_id", str)
#: The headers a browser may read from an answer (besides the CORS-safelisted ones).
EXPOSED = "request-id, x-request-id, x-turnout-provider, x-turnout-model, x-turnout-attempts, x-turnout-fallback, "
EXPOSED += "x-turnout-call-id, x-turnout-token-count, retry-after"
ALLOWED_METHODS = "GET, POST, OPTIONS"
#: A preflight may ask for these header names only (tokens, bounded).
_HEADER_LIST = re.compile(r"[A-Za-z0-9\-]{1,64}(\s*,\s*[A-Za-z0-9\-]{1,64}){0,31}")
_DEFAULT_ALLOWED_HEADERS = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta"
#: The names a gateway answers to whatever its configuration (besides the address it is bound to).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: How much of a refused header value a log line shows.
_SHOWN_CHARS = 80

log = logging.getLogger("turnout.gateway")

UNKNOWN_HOST = Failure(
    status=421,
    kind="invalid_request",
    message="this gateway does not answer to that host name; add it to [gateway] allowed_hosts",
    code="unknown_host",
)
CROSS_SITE = Failure(
    status=403,
    kind="forbidden",
    message="requests from another site's page are refused; allow its origin in [gateway] cors_origins",
    code="cross_site",
)
NOT_JSON = Failure(
    status=415,
    kind="invalid_request",
    message="the body must be JSON (Content-Type: application/json)",
    code="unsupported_media_type",
)


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
        allowed_hosts: ``[gateway] allowed_hosts``, the names answered besides :data:`LOOPBACK_HOSTS`.
        refused: Counts a refusal, by its reason (the failure's code).
    """

    def __init__(
        self,
        cors_origins: Iterable[str],
        error_response: Callable[[web.Request, Failure], web.Response],
        allowed_hosts: Iterable[str] = (),
        refused: Callable[[str], None] | None = None,
    ):
        origins = frozenset(cors_origins)
        self.any_origin = "*" in origins
        self.origins = origins - {"*"}
        self._error_response = error_response
        hosts = {h.lower().rstrip(".") for h in allowed_hosts}
        self.any_host = "*" in hosts
        self.hosts = (hosts - {"*"}) | LOOPBACK_HOSTS
        self._refused = refused

    def allow_host(self, host: str) -> None:
        """Answer to ``host`` too (the address the server is bound to)."""
        self.hosts = self.hosts | {host.lower().strip("[]").rstrip(".")}

    def refusal(self, request: web.Request, *, json_body: bool = False) -> Failure | None:
        """Why ``request`` is refused before any work (see the module docstring), or None when it may go on.

        Args:
            request: The request.
            json_body: The route reads a JSON body (its ``Content-Type`` must say so).
        """
        refused = self.host_refusal(request)
        if refused is not None:
            return refused
        headers = request.headers
        host = headers.get("Host")
        site = headers.get("Sec-Fetch-Site")
        origin = headers.get("Origin")
        if (site is not None or origin is not None) and self.allowed_origin(request) is None:
            if site in ("cross-site", "same-site"):
                return self._refuse(request, CROSS_SITE, origin or site)
            if origin is not None and urlsplit(origin).netloc != host:
                return self._refuse(request, CROSS_SITE, origin)
        if json_body:
            ctype = request.content_type
            if ctype != "application/json" and not (ctype.startswith("application/") and ctype.endswith("+json")):
                return self._refuse(request, NOT_JSON, headers.get("Content-Type", "(none)"))
        return None

    def host_refusal(self, request: web.Request) -> Failure | None:
        """The refusal of a ``Host`` the gateway does not answer to (DNS rebinding), or None."""
        host = request.headers.get("Host")
        if host is None or self.any_host or _host_name(host) in self.hosts:
            return None
        return self._refuse(request, UNKNOWN_HOST, host)

    def _refuse(self, request: web.Request, failure: Failure, value: str) -> Failure:
        reason = {"unknown_host": "host", "cross_site": "cross_site"}.get(failure.code or "", "content_type")
        log.warning(
            "turnout gateway: refused %s %s (%s: %s)",
            request.method[:16],
            request.path[:_SHOWN_CHARS].encode("unicode_escape").decode("ascii"),
            reason,
            ascii(value[:_SHOWN_CHARS]),
        )
        if self._refused is not None:
            self._refused(reason)
        return failure

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


def _host_name(host: str) -> str:
    """The name of a ``Host`` header: lower case, without its port, brackets or a trailing dot."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1:].partition("]")[0]
    if name.count(":") == 1:
        name = name.partition(":")[0]
    return name.rstrip(".")


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
