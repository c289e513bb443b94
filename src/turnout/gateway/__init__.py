"""The HTTP gateway (``turnout serve``): OpenAI- and Anthropic-compatible endpoints over a Turnout client.

Modules, one responsibility each: ``app`` (the aiohttp application, the per-request guard, the access
log, draining), ``auth`` (client keys), ``chat`` (one chat request, whole or streamed), ``wire`` (statuses,
attribution headers, model routing, the body limit), ``surface`` (the contract of a wire surface),
``openai_surface`` and ``anthropic_surface`` (the two wire formats), ``status`` (``/status`` and
``/v1/models``), ``metrics`` (Prometheus) and ``serve`` (the command, workers, graceful shutdown).
``docs/gateway.md`` is the user guide.
"""

from turnout.gateway.app import Gateway, create_app
from turnout.gateway.serve import GatewayServer, run

__all__ = ["Gateway", "GatewayServer", "create_app", "run"]
