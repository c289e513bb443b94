"""The HTTP gateway (``turnout serve``): OpenAI- and Anthropic-compatible endpoints over a Turnout client.

Modules, one responsibility each: ``app`` (the aiohttp application, the per-request guard, draining),
``auth`` (client keys), ``policy`` (what each key may use), ``spend`` (daily spend from the ledger),
``chat`` (one chat request, whole or streamed), ``wire`` (statuses, attribution headers, model routing,
bounds of client input), ``surface`` (the contract of a wire surface), ``openai_surface`` and
``anthropic_surface`` (the two wire formats), ``status`` (``/status`` and the shape of ``/v1/models``),
``metrics`` (Prometheus), ``accesslog`` (the access lines), ``connections`` (timeouts and the cap) and
``serve`` (the command, workers, graceful shutdown). ``docs/gateway.md`` is the user guide,
``docs/security.md`` the threat model and limits.
"""

from turnout.gateway.app import Gateway, create_app
from turnout.gateway.serve import GatewayServer, run

__all__ = ["Gateway", "GatewayServer", "create_app", "run"]
