"""How ``turnout check`` writes a configuration's plan: each route's entries, pools, embedding spaces, wire ids."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from turnout.config import Config, ConfigWarning, Plan, PoolSpec, Route

#: The id a profile sends for a model name: ``(profile, model) -> id``.
WireIds = Callable[[str, str], str]


def embedding_lines(cfg: Config, plan: Plan) -> list[str]:
    """For each route that asks for an embedding model: the entries an embedding call skips (another vector space).

    A route asks for an embedding model when its first model's name says so (``embed``) or ``[embeddings.spaces]``
    lists it; other routes are chat routes, and their fallbacks to other models are normal.
    """
    from turnout.core.embeddings import looks_like_embedding_model, space_notes
    from turnout.core.registry import family_for

    spaces = cfg.embeddings.space_names()
    profiles = cfg.profiles()
    pools = {p.name: p for p in plan.pools}
    lines: list[str] = []
    for route in (plan.default, *plan.routes):
        entries = [(e.profile, e.model) for e in route.entries]
        if not entries:
            continue
        first = entries[0][1] if entries[0][1] is not None else route.model or ""
        if not (looks_like_embedding_model(first) or first.removeprefix("models/") in spaces):
            continue
        protocols = [family_for(p.partition(".")[0], profiles[p].kind).protocol for p, _ in entries]
        notes = space_notes(entries, first, spaces, protocols=protocols)
        lines.append("")
        lines.append(f"embeddings via {_route_title(route, pools)}: one vector space, {first}")
        if not notes:
            notes = ["every entry produces it"]
        lines.extend(f"  {note}" for note in notes)
    return lines


def _route_title(route: Route, pools: dict[str, PoolSpec]) -> str:
    pool = pools.get(route.profile)
    target = f"{route.profile} (pool, {pool.strategy})" if pool is not None else route.profile
    if route.hint is None:
        return f"default: {target}"
    return f"hint:{route.hint} -> {target} (route model {route.model})"


def pool_lines(pools: Iterable[PoolSpec]) -> list[str]:
    """Each pool: its strategy, members (with weights when they matter) and fallbacks."""
    lines: list[str] = []
    for pool in pools:
        how = pool.strategy + (f", explores {pool.explore:.0%} of calls" if pool.strategy == "latency" else "")
        lines.append(f"pool {pool.name}: {how}")
        if pool.strategy == "weighted":
            members = ", ".join(f"{m} (weight {w:g})" for m, w in zip(pool.members, pool.weights, strict=True))
        else:
            members = ", ".join(pool.members)
        lines.append(f"  members: {members}")
        lines.append(f"  fallback: {', '.join(pool.fallback) if pool.fallback else '-'}")
        lines.append("")
    return lines


def wire_ids(config: Config) -> WireIds:
    """The id each profile sends for a configured model name (``turnout.core.model_ids``: one name on every cloud)."""
    from turnout.providers import wire_id

    profiles = config.profiles()
    return lambda profile, model: wire_id(profile, profiles[profile], model)


def plan_lines(plan: Plan, wire: WireIds | None = None) -> list[str]:
    """The pools, then the attempt order of the default target and every route, as printed by ``turnout check``.

    Entries of a pool's members are marked ``[pool <name>]``: each call tries them in the order its strategy
    chooses, before what follows the pool. With ``wire``, an entry whose profile sends another id for its model
    (a Bedrock inference profile, a Vertex version) says which: ``sends us.anthropic.…``.
    """
    pools = {p.name: p for p in plan.pools}
    lines = pool_lines(plan.pools)
    for route in (plan.default, *plan.routes):
        lines.append(_route_title(route, pools))
        for i, entry in enumerate(route.entries, 1):
            model = entry.model if entry.model is not None else "<requested model>"
            kind = "pinned" if entry.pinned else "unpinned"
            tries = plan.tries_per_entry
            member = f"  [pool {entry.pool}]" if entry.pool is not None else ""
            sent = wire(entry.profile, entry.model) if wire is not None and entry.model is not None else model
            sends = f"  sends {sent}" if sent != model else ""
            lines.append(
                f"  {i}. {entry.profile}/{model}  {kind}  {tries} tr{'ies' if tries != 1 else 'y'}{member}{sends}"
            )
        lines.append("")
    return lines[:-1]


def plan_json(plan: Plan, warnings: list[ConfigWarning], wire: WireIds | None = None) -> dict[str, Any]:
    """``turnout check --json`` output (``wire_model``: the id an entry sends for its model)."""

    def route(r: Route) -> dict[str, Any]:
        return {
            "hint": r.hint,
            "profile": r.profile,
            "model": r.model,
            "entries": [
                {
                    "profile": e.profile,
                    "model": e.model,
                    "pinned": e.pinned,
                    "wire_model": wire(e.profile, e.model) if wire is not None and e.model is not None else e.model,
                    "tries": plan.tries_per_entry,
                    "pool": e.pool,
                }
                for e in r.entries
            ],
        }

    return {
        "ok": True,
        "warnings": [{"code": w.code, "path": w.path, "message": w.message} for w in warnings],
        "pools": [
            {
                "name": p.name,
                "strategy": p.strategy,
                "members": list(p.members),
                "weights": dict(zip(p.members, p.weights, strict=True)),
                "explore": p.explore,
                "fallback": list(p.fallback),
            }
            for p in plan.pools
        ],
        "default": route(plan.default),
        "routes": [route(r) for r in plan.routes],
    }
