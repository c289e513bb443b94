"""The HTTP gateway (``turnout serve``): OpenAI- and Anthropic-compatible endpoints over a Turnout client.

Modules, one responsibility each: ``app`` (the aiohttp application, the per-request guard, draining),
``auth`` (client keys), ``access`` (what each key may use, and the route its ``model`` selects), ``spend`` (daily
spend from the ledger), ``chat`` (one chat request, whole or streamed), ``failures`` (the status each failure
gets), ``bounds`` (bounds of client input, header encoding, attribution headers), ``surface`` (the contract of a
wire surface), ``openai_surface``, ``responses_surface`` (with ``responses_stream``) and ``anthropic_surface``
(the wire formats), ``passthrough`` (what only a surface's own protocol carries), ``counting`` (``count_tokens``
and the token estimate), ``edges`` (request ids, CORS, unknown routes), ``status`` (``/status`` and the shape of
``/v1/models``), ``metrics`` (Prometheus), ``workers`` (the whole server's totals across worker processes),
``page``, ``page_data`` and ``page_html`` (the status page), ``signin`` (its login cookie), ``accesslog`` (the
access lines), ``connections`` (timeouts and the cap) and ``serve`` (the command, workers, graceful shutdown).
``docs/gateway.md`` is the user guide, ``docs/security.md`` the threat model and limits,
``docs/observability.md`` the metrics across workers and the status page.
"""

from turnout.gateway.app import Gateway, create_app
from turnout.gateway.serve import GatewayServer, run

__all__ = ["Gateway", "GatewayServer", "create_app", "run"]
