"""The HTTP gateway (``turnout serve``): OpenAI- and Anthropic-compatible endpoints over a Turnout client.

Modules, one responsibility each: ``app`` (the aiohttp application, the per-request guard, the access
log, draining), ``auth`` (client keys), ``chat`` (one chat request, whole or streamed), ``wire`` (statuses,
attribution headers, model routing, the body limit), ``surface`` (the contract of a wire surface),
``openai_surface``, ``responses_surface`` (with ``responses_stream``) and ``anthropic_surface`` (the wire
formats), ``passthrough`` (what only a surface's own protocol carries), ``counting`` (``count_tokens`` and
the token estimate), ``edges`` (request ids, CORS, unknown routes), ``status`` (``/status`` and
``/v1/models``), ``metrics`` (Prometheus) and ``serve`` (the command, workers, graceful shutdown).
``docs/gateway.md`` is the user guide.
"""

from turnout.gateway.app import Gateway, create_app
from turnout.gateway.serve import GatewayServer, run

__all__ = ["Gateway", "GatewayServer", "create_app", "run"]
