"""The fallback graph: validation reports, pruning and the materialised attempt order.

A profile becomes an ordered list of entries, depth first:

1. its effective primary model (an explicit override, else the profile's ``model``) as a pinned entry,
   then each ``fallback_models`` item as a pinned entry; or, with no primary model, one unpinned entry
   (and ``fallback_models`` are not materialised);
2. then each ``fallback`` profile in order, recursively, each with its own model, endpoint and keys.

A pool (``[pools.<name>]``) stands wherever a profile can: it becomes its members' entries (each member's own
model and ``fallback_models``; its own ``fallback`` is not followed inside the pool), every member's first entry
first, then every member's second, and so on, each marked with the pool's name; then the pool's ``fallback``
targets like a profile's. An effective primary model given for a pool (``default_model``, a caller's model)
becomes every member's primary model.

Dangling references, cycles, links deeper than :data:`MAX_FALLBACK_DEPTH`, blank fallback models and
fallback models equal to the primary are reported and pruned, never fatal. A profile reached twice
(a diamond) is materialised once. A reachable profile without a credential is fatal.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.config.loader import (
    default_profile,
    default_target,
    did_you_mean,
    profile_names,
    resolve_profile_ref,
    resolve_target_ref,
)
from turnout.config.schema import Breaker, Config, Hedge, PoolStrategy, Profile
from turnout.core.errors import ConfigError
from turnout.core.registry import family_for
from turnout.core.secrets import Secret

MAX_FALLBACK_DEPTH = 3
#: The most upstream calls one request may make (its entries × the tries of each) before ``turnout check`` warns.
MAX_FAN_OUT = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigWarning:
    """A problem the configuration survives: reported, and the offending link pruned.

    Attributes:
        code: Stable code, e.g. ``dangling_fallback_ref``.
        path: Key path, e.g. ``providers.models.openai.main.fallback[1]``.
        message: What is wrong and what happens at run time.
    """

    code: str
    path: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EntrySpec:
    """One (profile, model) step of the materialised order.

    Attributes:
        profile: ``family.alias``.
        model: The pinned model, or None for an unpinned entry (it forwards the caller's model).
        pool: The pool this entry's profile is a member of here (None: the entry stands alone).
    """

    profile: str
    model: str | None
    pool: str | None = None

    @property
    def pinned(self) -> bool:
        """Whether this entry forces its own model."""
        return self.model is not None

    @property
    def family(self) -> str:
        """The family part of :attr:`profile`."""
        return self.profile.partition(".")[0]

    @property
    def alias(self) -> str:
        """The alias part of :attr:`profile`."""
        return self.profile.partition(".")[2]


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    """One ``[pools.<name>]`` with its references resolved.

    Attributes:
        name: The pool's name.
        strategy: ``ordered``, ``weighted``, ``least_busy`` or ``latency``.
        members: The member profiles (``family.alias``), in configured order.
        weights: Each member's weight, aligned with :attr:`members` (1 when not configured).
        explore: ``latency``: the share of calls that try another member first.
        fallback: The pool's ``fallback`` references as written.
    """

    name: str
    strategy: PoolStrategy
    members: tuple[str, ...]
    weights: tuple[float, ...]
    explore: float
    fallback: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """A target the router can select: the default one, or a ``hint:<name>`` route.

    Attributes:
        hint: The hint name (None for the default target).
        profile: The target profile, ``family.alias``, or the target pool's name.
        model: The model the route asks for (a pinned target ignores it).
        entries: The materialised order for this target.
        credential: The route's own ``api_key`` overriding the profile's key, when given.
    """

    hint: str | None
    profile: str
    model: str | None
    entries: tuple[EntrySpec, ...]
    credential: Secret | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Everything the factory builds: the default target, each route, and every configured pool."""

    default: Route
    routes: tuple[Route, ...]
    tries_per_entry: int
    pools: tuple[PoolSpec, ...] = ()


def pool_specs(config: Config) -> dict[str, PoolSpec]:
    """Every configured pool by name, its members resolved (the config was validated when it loaded)."""
    out: dict[str, PoolSpec] = {}
    for name, pool in config.pools.items():
        members = tuple(resolve_profile_ref(config, m) or m for m in pool.members)
        weights = {resolve_profile_ref(config, k) or k: w for k, w in pool.weights.items()}
        out[name] = PoolSpec(
            name=name,
            strategy=pool.strategy,
            members=members,
            weights=tuple(weights.get(m, 1.0) for m in members),
            explore=pool.explore,
            fallback=tuple(pool.fallback),
        )
    return out


def _path(name: str) -> str:
    return f"providers.models.{name}"


def profile_credentials(config: Config, name: str) -> list[Secret]:
    """The credentials of a profile, in rotation order (empty when it has none).

    The profile's ``api_keys`` pool, else its ``api_key`` / ``api_key_env``; the default profile
    also gets ``[reliability] api_keys`` when it has no pool of its own.
    """
    profile = config.profiles()[name]
    if profile.api_keys:
        keys = list(profile.api_keys)
    elif profile.api_key is not None:
        keys = [profile.api_key]
    elif profile.env_key is not None:
        keys = [profile.env_key]
    else:
        keys = []
    if not profile.api_keys and config.reliability.api_keys and name == _safe_default(config):
        keys += [k for k in config.reliability.api_keys if k not in keys]
    return [k for k in keys if k]


def _safe_default(config: Config) -> str | None:
    try:
        return default_profile(config)
    except ConfigError:
        return None


def needs_credential(name: str, profile: Profile) -> bool:
    """Whether the profile's family requires a key (local families such as ollama do not)."""
    return family_for(name.partition(".")[0], profile.kind).needs_key


def _missing_credential_detail(profile: Profile) -> str:
    """Why each configured key holds nothing: ``" ($A is not set; $B is set but empty)"``, or ``""``."""
    given = ([profile.api_key] if profile.api_key is not None else []) + list(profile.api_keys)
    if profile.env_key is not None:
        given.append(profile.env_key)
    reasons = [why for k in given if (why := k.unresolved) is not None]
    return f" ({'; '.join(reasons)})" if reasons else ""


# --- warnings -------------------------------------------------------------------------------------


def collect_warnings(config: Config) -> list[ConfigWarning]:
    """Every non-fatal problem of the configuration, each once, in file order."""
    out: list[ConfigWarning] = []
    profiles = config.profiles()
    for name, profile in profiles.items():
        out += _unsupported(profile, _path(name))
        if profile.model is not None:
            for i, m in enumerate(profile.fallback_models):
                path = f"{_path(name)}.fallback_models[{i}]"
                if not m.strip():
                    out.append(
                        ConfigWarning(
                            code="empty_fallback_model",
                            path=path,
                            message=f"fallback_models entry {i} on {name} is empty; it is skipped at runtime",
                        )
                    )
                elif m == profile.model:
                    out.append(
                        ConfigWarning(
                            code="fallback_model_duplicates_primary",
                            path=path,
                            message=f"fallback_models entry {m!r} on {name} duplicates the primary model; "
                            "it is skipped at runtime",
                        )
                    )
    out += _unsupported(config.reliability, "reliability")
    out += _pool_warnings(config)
    out += _switched_off(config)
    cycles: set[frozenset[str]] = set()
    for name in [*profiles, *config.pools]:
        _walk_warnings(config, name, 1, [name], out, cycles)
    out += _route_credential_warnings(config)
    out += _fan_out_warnings(config)
    seen: set[tuple[str, str]] = set()
    unique: list[ConfigWarning] = []
    for w in out:
        if (w.code, w.path) not in seen:
            seen.add((w.code, w.path))
            unique.append(w)
    return unique


def _unsupported(section: Profile | object, path: str) -> list[ConfigWarning]:
    names: frozenset[str] = getattr(type(section), "UNSUPPORTED", frozenset())
    return [
        ConfigWarning(
            code="unsupported_key",
            path=f"{path}.{key}",
            message=f"{key} is accepted for compatibility but has no effect in Turnout",
        )
        for key in sorted(names)
        if getattr(section, key, None) is not None
    ]


def _walk_warnings(
    config: Config,
    name: str,
    depth: int,
    stack: list[str],
    out: list[ConfigWarning],
    cycles: set[frozenset[str]],
) -> None:
    fallback, base = _fallback_of(config, name)
    refs = [r for r in fallback if r.strip()]
    if not refs:
        return
    if depth > MAX_FALLBACK_DEPTH:
        out.append(
            ConfigWarning(
                code="max_fallback_depth_exceeded",
                path=f"{base}.fallback",
                message=f"fallback chain from {stack[0]} exceeds the maximum depth of {MAX_FALLBACK_DEPTH} at {name}; "
                "deeper links are pruned at runtime",
            )
        )
        return
    for i, raw in enumerate(fallback):
        if not raw.strip():
            continue
        path = f"{base}.fallback[{i}]"
        resolved = resolve_target_ref(config, raw)
        if resolved is None:
            out.append(
                ConfigWarning(
                    code="dangling_fallback_ref",
                    path=path,
                    message=f"fallback {raw!r} on {name} does not resolve to a configured providers.models entry "
                    "or pool; this fallback link is skipped at runtime" + did_you_mean(raw, profile_names(config)),
                )
            )
            continue
        if resolved in stack:
            members = frozenset(stack[stack.index(resolved) :])
            if members in cycles:  # the same cycle seen from another root
                continue
            cycles.add(members)
            cycle = " -> ".join([*stack, resolved])
            out.append(
                ConfigWarning(
                    code="fallback_cycle",
                    path=path,
                    message=f"fallback {raw!r} on {name} closes a cycle ({cycle}); the cycle edge is pruned at runtime",
                )
            )
            continue
        _walk_warnings(config, resolved, depth + 1, [*stack, resolved], out, cycles)


def _fallback_of(config: Config, name: str) -> tuple[list[str], str]:
    """The ``fallback`` references of a profile or pool, and the key path of its table."""
    pool = config.pools.get(name)
    if pool is not None:
        return pool.fallback, f"pools.{name}"
    return config.profiles()[name].fallback, _path(name)


def _pool_warnings(config: Config) -> list[ConfigWarning]:
    """Pool settings that have no effect, and links a pool makes that are not followed."""
    out: list[ConfigWarning] = []
    profiles = config.profiles()
    for name, pool in config.pools.items():
        path = f"pools.{name}"
        if pool.weights and pool.strategy != "weighted":
            out.append(
                ConfigWarning(
                    code="pool_setting_unused",
                    path=f"{path}.weights",
                    message=f'weights apply to strategy "weighted"; pool {name} is "{pool.strategy}" and ignores them',
                )
            )
        if "explore" in pool.model_fields_set and pool.strategy != "latency":
            out.append(
                ConfigWarning(
                    code="pool_setting_unused",
                    path=f"{path}.explore",
                    message=f'explore applies to strategy "latency"; pool {name} is "{pool.strategy}" and ignores it',
                )
            )
        members = {resolve_profile_ref(config, m): i for i, m in enumerate(pool.members)}
        for member, i in members.items():
            if member is not None and any(r.strip() for r in profiles[member].fallback):
                out.append(
                    ConfigWarning(
                        code="pool_member_fallback_ignored",
                        path=f"{path}.members[{i}]",
                        message=f"{member} has its own fallback; inside pool {name} it is not followed "
                        "(the members fail over to each other, then to the pool's fallback)",
                    )
                )
        for i, raw in enumerate(pool.fallback):
            resolved = resolve_profile_ref(config, raw) if raw.strip() else None
            if resolved is not None and resolved in members:
                out.append(
                    ConfigWarning(
                        code="pool_fallback_is_member",
                        path=f"{path}.fallback[{i}]",
                        message=f"{resolved} is a member of pool {name}; it is tried as a member, not again after "
                        "the pool",
                    )
                )
    if config.reliability.api_keys and config.default_provider and config.default_provider.strip() in config.pools:
        out.append(
            ConfigWarning(
                code="reliability_keys_unused",
                path="reliability.api_keys",
                message="these keys join the default profile's key rotation, and the default is a pool, not a "
                "profile: they are not used; set api_keys on the pool's members instead",
            )
        )
    return out


def _switched_off(config: Config) -> list[ConfigWarning]:
    """Tables whose settings have no effect because what they tune is off.

    A ``hedge`` or ``breaker`` table (``[reliability.*]`` or a profile's) that sets keys while the feature stays
    off wherever the table applies, and ``[state] url`` under ``backend = "memory"``.
    """
    out: list[ConfigWarning] = []
    profiles = config.profiles()
    for feature, default, none, off in (
        ("hedge", False, "no profile hedges", "does not hedge"),
        ("breaker", True, "no entry has a breaker", "has no breaker"),
    ):
        base = getattr(config.reliability, feature)
        base_on = default if base.enabled is None else base.enabled
        tables = {name: t for name, p in profiles.items() if (t := getattr(p, feature)) is not None}
        on_somewhere = base_on or any(t.enabled for t in tables.values())
        if set(base.settings()) - {"enabled"} and not on_somewhere:
            out.append(_off(f"reliability.{feature}", base, none))
        for name, table in tables.items():
            if set(table.settings()) - {"enabled"} and not (base_on if table.enabled is None else table.enabled):
                out.append(_off(f"{_path(name)}.{feature}", table, f"{name} {off}"))
    if config.state.backend == "memory" and config.state.url is not None:
        out.append(
            ConfigWarning(
                code="setting_unused",
                path="state.url",
                message='url applies to backend = "redis"; with the memory backend it has no effect',
            )
        )
    return out


def _off(path: str, table: Breaker | Hedge, result: str) -> ConfigWarning:
    keys = ", ".join(sorted(set(table.settings()) - {"enabled"}))
    why = "enabled = false" if table.enabled is False else "enabled is not true here or above"
    return ConfigWarning(
        code="setting_unused",
        path=path,
        message=f"[{path}] sets {keys} but {why}: {result}, so they have no effect; set enabled = true to use them",
    )


def _route_credential_warnings(config: Config) -> list[ConfigWarning]:
    out: list[ConfigWarning] = []
    first: dict[str, tuple[int, Secret | None]] = {}
    for i, route in enumerate(config.model_routes):
        target = resolve_target_ref(config, route.model_provider) or route.model_provider
        if target not in first:
            first[target] = (i, route.api_key)
            continue
        j, key = first[target]
        if route.api_key is not None and route.api_key != key:
            out.append(
                ConfigWarning(
                    code="route_credential_conflict",
                    path=f"model_routes[{i}].api_key",
                    message=f"routes model_routes[{j}] and model_routes[{i}] share target {target} with different "
                    f"keys; model_routes[{j}]'s {'key' if key is not None else 'lack of a key'} is used for both",
                )
            )
    return out


def _fan_out_warnings(config: Config) -> list[ConfigWarning]:
    """Targets where one request may make more than :data:`MAX_FAN_OUT` upstream calls.

    The figure is the target's materialised entries times the tries of each (``provider_retries`` + 1; a switch to
    another key of a pool takes one of those tries, and a hedge gives its entry one try instead): a request that
    fails everywhere makes them all. The default target and each route first, then every other profile and pool,
    which a caller may name as the provider.
    """
    tries = config.reliability.provider_retries + 1
    out: list[ConfigWarning] = []
    done: set[str] = set()

    def report(path: str, what: str, root: str, entries: tuple[EntrySpec, ...] | None) -> None:
        done.add(root)
        if entries is None or len(entries) * tries <= MAX_FAN_OUT:
            return
        out.append(
            ConfigWarning(
                code="large_fan_out",
                path=path,
                message=f"one request to {what} may make up to {len(entries) * tries:,} upstream calls "
                f"({len(entries):,} entries × {tries} tr{'ies' if tries != 1 else 'y'} each; a key switch takes one of "
                f"an entry's tries), above {MAX_FAN_OUT}; prune its fallbacks or pool members, or lower "
                "[reliability] provider_retries",
            )
        )

    primary = _safe_target(config)
    default = _entries(config, primary, config.default_model) if primary is not None else None
    if primary is not None:
        path = "default_provider" if config.default_provider else _root_path(config, primary)
        report(path, f"the default target {primary}", primary, default)
    for i, route in enumerate(config.model_routes):
        target = resolve_target_ref(config, route.model_provider)
        if target is not None:
            entries = default if target == primary else _entries(config, target, None)
            report(f"model_routes[{i}]", f"hint:{route.hint} ({target})", target, entries)
    for root in [*config.profiles(), *config.pools]:
        if root not in done:
            report(_root_path(config, root), root, root, _entries(config, root, None))
    return out


def _safe_target(config: Config) -> str | None:
    try:
        return default_target(config)
    except ConfigError:
        return None


def _entries(config: Config, root: str, override: str | None) -> tuple[EntrySpec, ...] | None:
    """``root``'s materialised order (None: it cannot be built, which the checks that build it report)."""
    try:
        return materialize(config, root, model_override=override, has_credential=True)
    except ConfigError:
        return None


def _root_path(config: Config, root: str) -> str:
    return f"pools.{root}" if root in config.pools else _path(root)


# --- materialisation ------------------------------------------------------------------------------


def materialize(
    config: Config, root: str, *, model_override: str | None = None, has_credential: bool | None = None
) -> tuple[EntrySpec, ...]:
    """The ordered entries for ``root`` (``family.alias``), pruned as :func:`collect_warnings` reports.

    Args:
        config: The loaded configuration.
        root: The profile (or pool) to start from.
        model_override: An effective primary model replacing the profile's ``model`` (the pin); for a pool,
            every member's.
        has_credential: Whether the root has a credential from elsewhere (a route key); None checks the profile.

    Raises:
        ConfigError: The root, or a fallback profile or pool member it reaches, has no credential.
    """
    if root in config.pools:
        entries: list[EntrySpec] = []
        _push_pool(config, root, 1, [root], {root}, entries, model_override)
        return tuple(entries)
    profiles = config.profiles()
    if root not in profiles:
        raise ConfigError(f"{root!r} does not name a configured profile", code="unknown_profile")
    profile = profiles[root]
    if has_credential is None:
        has_credential = bool(profile_credentials(config, root))
    if not has_credential and needs_credential(root, profile):
        raise ConfigError(
            f"profile {root} ([{_path(root)}]) has no credential{_missing_credential_detail(profile)}. "
            f"Set api_key, api_key_env or api_keys on [{_path(root)}].",
            path=f"{_path(root)}.api_key",
            code="missing_credential",
        )
    entries = []
    _push_entries(entries, root, profile, model_override)
    done = {root}
    _append_chain(config, root, 1, [root], done, entries)
    return tuple(entries)


def _push_entries(
    out: list[EntrySpec], name: str, profile: Profile, override: str | None, pool: str | None = None
) -> None:
    primary = override.strip() if override and override.strip() else profile.model
    if not primary:
        out.append(EntrySpec(profile=name, model=None, pool=pool))
        return
    out.append(EntrySpec(profile=name, model=primary, pool=pool))
    for m in profile.fallback_models:
        if m.strip() and m != primary:
            out.append(EntrySpec(profile=name, model=m, pool=pool))


def _push_pool(
    config: Config,
    name: str,
    depth: int,
    stack: list[str],
    done: set[str],
    out: list[EntrySpec],
    override: str | None = None,
) -> None:
    """The entries of pool ``name``'s members, then its fallbacks.

    The members' first entries come first, then their second ones (their first ``fallback_models``), and so on:
    each such tier is one set of interchangeable entries the pool arranges per call, so a member's lesser model
    is not tried before another member's primary one. A member reached earlier in the walk stays where it was.
    """
    tiers: list[list[EntrySpec]] = []
    for i, raw in enumerate(config.pools[name].members):
        member = resolve_profile_ref(config, raw)
        if member is None or member in done:
            continue
        reference = f"pool member {raw.strip()!r} of {name}"
        profile = _reachable(config, member, reference, f"pools.{name}.members[{i}]", "the pool")
        done.add(member)
        own: list[EntrySpec] = []
        _push_entries(own, member, profile, override, pool=name)
        for n, entry in enumerate(own):
            if n == len(tiers):
                tiers.append([])
            tiers[n].append(entry)
    for tier in tiers:
        out.extend(tier)
    _append_chain(config, name, depth, stack, done, out)


def _append_chain(
    config: Config, name: str, depth: int, stack: list[str], done: set[str], out: list[EntrySpec]
) -> None:
    if depth > MAX_FALLBACK_DEPTH:
        return
    fallback, base = _fallback_of(config, name)
    for i, raw in enumerate(fallback):
        if not raw.strip():
            continue
        resolved = resolve_target_ref(config, raw)
        if resolved is None or resolved in stack or resolved in done:
            continue
        if resolved in config.pools:
            done.add(resolved)
            _push_pool(config, resolved, depth + 1, [*stack, resolved], done, out)
            continue
        target = _reachable(config, resolved, f"fallback provider {raw.strip()!r}", f"{base}.fallback[{i}]", "fallback")
        done.add(resolved)
        _push_entries(out, resolved, target, None)
        _append_chain(config, resolved, depth + 1, [*stack, resolved], done, out)


def _reachable(config: Config, name: str, reference: str, path: str, within: str) -> Profile:
    """Profile ``name``, reached through ``reference`` (at key ``path``, in ``within``).

    Raises:
        ConfigError: It needs a key and has none.
    """
    profile = config.profiles()[name]
    if needs_credential(name, profile) and not profile_credentials(config, name):
        raise ConfigError(
            f"{reference} resolved to {name} ([{_path(name)}]) but no profile-resolved credential exists"
            f"{_missing_credential_detail(profile)}. Set api_key on [{_path(name)}] or remove it from {within}.",
            path=path,
            code="missing_credential",
        )
    return profile


def route_credential(config: Config, target: str) -> Secret | None:
    """The key of the first route naming ``target``, when that route has one (it wins over the profile's)."""
    for route in config.model_routes:
        if resolve_profile_ref(config, route.model_provider) == target:
            return route.api_key if route.api_key else None
    return None


def build_plan(config: Config, *, profile: str | None = None, model: str | None = None) -> Plan:
    """Materialise the default target (``profile``/``model`` override the config's defaults) and every route.

    Raises:
        ConfigError: A reachable profile has no credential, or there is no default profile.
    """
    primary = resolve_target_ref(config, profile) if profile else default_target(config)
    if primary is None:
        raise ConfigError(f"{profile!r} does not name a configured profile or pool", code="unknown_profile")
    pin = model if model is not None else (config.default_model if profile is None else None)
    primary_key = route_credential(config, primary)
    entries = materialize(config, primary, model_override=pin, has_credential=True if primary_key else None)
    default = Route(
        hint=None,
        profile=primary,
        model=pin or _own_model(config, primary),
        entries=entries,
        credential=primary_key,
    )
    routes: list[Route] = []
    for r in config.model_routes:
        target = resolve_target_ref(config, r.model_provider)
        assert target is not None  # checked when the config loaded
        key = route_credential(config, target)
        if target == primary:
            entries = default.entries
        else:
            entries = materialize(config, target, has_credential=True if key else None)
        routes.append(Route(hint=r.hint, profile=target, model=r.model, entries=entries, credential=key))
    return Plan(
        default=default,
        routes=tuple(routes),
        tries_per_entry=config.reliability.provider_retries + 1,
        pools=tuple(pool_specs(config).values()),
    )


def _own_model(config: Config, target: str) -> str | None:
    """A profile's ``model``; for a pool, the first member's that has one (what its unpinned members receive)."""
    profiles = config.profiles()
    pool = config.pools.get(target)
    if pool is None:
        return profiles[target].model
    models = (profiles[m].model for m in (resolve_profile_ref(config, r) for r in pool.members) if m is not None)
    return next((m for m in models if m), None)
