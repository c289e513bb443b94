"""Helpers shared by the integration tests: configs shaped like ``turnout.toml`` pointing at the simulator."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from turnout import Client
from turnout.core.attribution import Attempt
from turnout.core.secrets import key_id
from turnout.sim import Simulator

#: The four wire protocols every scenario runs through (family name == simulator protocol name).
FAMILIES = ("openai", "anthropic", "gemini", "ollama")

KEY = "sk-it-test-key-0001"
KID = key_id(KEY)


def profile(sim: Simulator, family: str, model: str | None, *, key: str | None = KEY, **extra: Any) -> dict[str, Any]:
    """One ``[providers.models.<family>.<alias>]`` table whose endpoint is the simulator."""
    table: dict[str, Any] = {"uri": sim.base_url(family)}  # type: ignore[arg-type]
    if model is not None:
        table["model"] = model
    if key is not None:
        table["api_key"] = key
    table.update(extra)
    return table


def config(
    profiles: Mapping[str, Mapping[str, Any]],
    *,
    default: str | None = None,
    retries: int = 2,
    backoff_ms: int = 50,
    **top: Any,
) -> dict[str, Any]:
    """A whole configuration: ``profiles`` maps ``family.alias`` to its table; the first is the default."""
    models: dict[str, dict[str, Any]] = {}
    for name, table in profiles.items():
        family, _, alias = name.partition(".")
        models.setdefault(family, {})[alias] = dict(table)
    cfg: dict[str, Any] = {
        "default_provider": default or next(iter(profiles)),
        "providers": {"models": models},
        "reliability": {"provider_retries": retries, "provider_backoff_ms": backoff_ms},
    }
    cfg.update(top)
    return cfg


def client(cfg: Mapping[str, Any], **options: Any) -> Client:
    """A client built exactly as users build one, with the ledger off."""
    options.setdefault("ledger", False)
    return Client.from_dict(cfg, **options)


def trail(attempts: Iterable[Attempt]) -> list[tuple[str, str, str, int | None]]:
    """``(provider, model, outcome, status)`` per attempt."""
    return [(a.provider, a.model, a.outcome, a.status) for a in attempts]


async def upstream(sim: Simulator, count: int) -> list[tuple[str, str]]:
    """The ``(model, outcome)`` of every request the simulator saw, once exactly ``count`` have settled."""
    entries = await sim.wait_for_log(count)
    assert len(sim.log) == count, [(e.model, e.outcome) for e in sim.log]
    return [(e.model, e.outcome) for e in entries]
