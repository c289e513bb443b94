"""The fallback graph: validation reports, pruning and the materialised attempt order.

A profile becomes an ordered list of entries, depth first:

1. its effective primary model (an explicit override, else the profile's ``model``) as a pinned entry,
   then each ``fallback_models`` item as a pinned entry; or, with no primary model, one unpinned entry
   (and ``fallback_models`` are not materialised);
2. then each ``fallback`` profile in order, recursively, each with its own model, endpoint and keys.

Dangling references, cycles, links deeper than :data:`MAX_FALLBACK_DEPTH`, blank fallback models and
fallback models equal to the primary are reported and pruned, never fatal. A profile reached twice
(a diamond) is materialised once. A reachable profile without a credential is fatal.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.config.loader import default_profile, resolve_profile_ref
from turnout.config.schema import Config, Profile
from turnout.config.secrets import Secret
from turnout.errors import ConfigError
from turnout.providers.registry import family_for

MAX_FALLBACK_DEPTH = 3


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
    """

    profile: str
    model: str | None

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
class Route:
    """A target the router can select: the default one, or a ``hint:<name>`` route.

    Attributes:
        hint: The hint name (None for the default target).
        profile: The target profile, ``family.alias``.
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
    """Everything the factory builds: the default target and each route."""

    default: Route
    routes: tuple[Route, ...]
    tries_per_entry: int


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
    given = ([profile.api_key] if profile.api_key is not None else []) + list(profile.api_keys)
    sources = [k.source for k in given if k.missing]
    if profile.api_key_env:
        sources.append(f"${profile.api_key_env}")
    if sources:
        return f" ({', '.join(sources)} {'is' if len(sources) == 1 else 'are'} not set)"
    return ""


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
    cycles: set[frozenset[str]] = set()
    for name in profiles:
        _walk_warnings(config, name, 1, [name], out, cycles)
    out += _route_credential_warnings(config)
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
    profile = config.profiles()[name]
    refs = [r for r in profile.fallback if r.strip()]
    if not refs:
        return
    if depth > MAX_FALLBACK_DEPTH:
        out.append(
            ConfigWarning(
                code="max_fallback_depth_exceeded",
                path=f"{_path(name)}.fallback",
                message=f"fallback chain from {stack[0]} exceeds the maximum depth of {MAX_FALLBACK_DEPTH} at {name}; "
                "deeper links are pruned at runtime",
            )
        )
        return
    for i, raw in enumerate(profile.fallback):
        if not raw.strip():
            continue
        path = f"{_path(name)}.fallback[{i}]"
        resolved = resolve_profile_ref(config, raw)
        if resolved is None:
            out.append(
                ConfigWarning(
                    code="dangling_fallback_ref",
                    path=path,
                    message=f"fallback {raw!r} on {name} does not resolve to a configured providers.models entry; "
                    "this fallback link is skipped at runtime",
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


def _route_credential_warnings(config: Config) -> list[ConfigWarning]:
    out: list[ConfigWarning] = []
    first: dict[str, tuple[int, Secret | None]] = {}
    for i, route in enumerate(config.model_routes):
        target = resolve_profile_ref(config, route.model_provider) or route.model_provider
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


# --- materialisation ------------------------------------------------------------------------------


def materialize(
    config: Config, root: str, *, model_override: str | None = None, has_credential: bool | None = None
) -> tuple[EntrySpec, ...]:
    """The ordered entries for ``root`` (``family.alias``), pruned as :func:`collect_warnings` reports.

    Args:
        config: The loaded configuration.
        root: The profile to start from.
        model_override: An effective primary model replacing the profile's ``model`` (the pin).
        has_credential: Whether the root has a credential from elsewhere (a route key); None checks the profile.

    Raises:
        ConfigError: The root, or a fallback profile it reaches, has no credential.
    """
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
    entries: list[EntrySpec] = []
    _push_entries(entries, root, profile, model_override)
    done = {root}
    _append_chain(config, root, 1, [root], done, entries)
    return tuple(entries)


def _push_entries(out: list[EntrySpec], name: str, profile: Profile, override: str | None) -> None:
    primary = override.strip() if override and override.strip() else profile.model
    if not primary:
        out.append(EntrySpec(profile=name, model=None))
        return
    out.append(EntrySpec(profile=name, model=primary))
    for m in profile.fallback_models:
        if m.strip() and m != primary:
            out.append(EntrySpec(profile=name, model=m))


def _append_chain(
    config: Config, name: str, depth: int, stack: list[str], done: set[str], out: list[EntrySpec]
) -> None:
    if depth > MAX_FALLBACK_DEPTH:
        return
    profiles = config.profiles()
    for i, raw in enumerate(profiles[name].fallback):
        if not raw.strip():
            continue
        resolved = resolve_profile_ref(config, raw)
        if resolved is None or resolved in stack or resolved in done:
            continue
        target = profiles[resolved]
        if needs_credential(resolved, target) and not profile_credentials(config, resolved):
            raise ConfigError(
                f"fallback provider {raw.strip()!r} resolved to {resolved} ([{_path(resolved)}]) but no "
                f"profile-resolved credential exists{_missing_credential_detail(target)}. Set api_key on "
                f"[{_path(resolved)}] or remove it from fallback.",
                path=f"{_path(name)}.fallback[{i}]",
                code="missing_credential",
            )
        done.add(resolved)
        _push_entries(out, resolved, target, None)
        _append_chain(config, resolved, depth + 1, [*stack, resolved], done, out)


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
    primary = resolve_profile_ref(config, profile) if profile else default_profile(config)
    if primary is None:
        raise ConfigError(f"{profile!r} does not name a configured profile", code="unknown_profile")
    pin = model if model is not None else (config.default_model if profile is None else None)
    primary_key = route_credential(config, primary)
    default = Route(
        hint=None,
        profile=primary,
        model=pin or config.profiles()[primary].model,
        entries=materialize(config, primary, model_override=pin, has_credential=True if primary_key else None),
        credential=primary_key,
    )
    routes: list[Route] = []
    for r in config.model_routes:
        target = resolve_profile_ref(config, r.model_provider)
        assert target is not None  # checked when the config loaded
        key = route_credential(config, target)
        if target == primary:
            entries = default.entries
        else:
            entries = materialize(config, target, has_credential=True if key else None)
        routes.append(Route(hint=r.hint, profile=target, model=r.model, entries=entries, credential=key))
    return Plan(default=default, routes=tuple(routes), tries_per_entry=config.reliability.provider_retries + 1)
