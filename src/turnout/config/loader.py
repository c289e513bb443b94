"""Loading ``turnout.toml``: from a file, a TOML string or a mapping, with errors that name the key path.

Everything that can be checked without building providers is checked here, when the config loads,
not on the first request.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from turnout.config.schema import Config, Pool, Profile
from turnout.core.errors import ConfigError
from turnout.core.registry import Family, family_for
from turnout.core.secrets import Secret

#: A pool's name: no dot (so ``family.alias`` always names a profile), and safe in paths, logs and labels.
_POOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def format_path(loc: tuple[int | str, ...] | list[int | str]) -> str:
    """``("providers", "models", "openai", "main", "fallback", 1)`` → ``providers.models.openai.main.fallback[1]``.

    A key that holds a space, a colon or a character that is not printable (a header name ``"x h:"``) is quoted,
    escaped: the path stays one line, and where it ends stays clear.
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = str(part)
            if not key.isprintable() or ":" in key or any(c.isspace() for c in key):
                key = repr(key[:64])
            out += f".{key}" if out else key
    return out


def find_config_path(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The config file: ``explicit``, else ``$TURNOUT_CONFIG``, else ``./turnout.toml``."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get("TURNOUT_CONFIG"):
        return Path(env["TURNOUT_CONFIG"])
    return Path("turnout.toml")


def load_config_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Load and validate a TOML file.

    Raises:
        ConfigError: The file is missing, is not valid TOML, or does not validate.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} not found", code="file_not_found") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(p)!r}: {exc.strerror}", code="file_unreadable") from exc
    return load_config_toml(text, env=env, source=str(p))


def load_config_toml(text: str, env: Mapping[str, str] | None = None, *, source: str = "<string>") -> Config:
    """Load and validate TOML text.

    Raises:
        ConfigError: The text is not valid TOML or does not validate.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source} is not valid TOML: {exc}", code="toml_syntax") from exc
    return load_config_dict(data, env=env)


def load_config_dict(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Validate a mapping shaped like ``turnout.toml``.

    Raises:
        ConfigError: A key is unknown, a value is invalid, or a reference does not resolve.
    """
    env = os.environ if env is None else env
    if not isinstance(data, Mapping):
        raise ConfigError("the configuration must be a table/mapping", code="invalid_type")
    check_keys(data, Config, ())
    try:
        config = Config.model_validate(dict(data), context={"env": env})
    except ValidationError as exc:
        raise _config_error(exc) from None
    _check_semantics(config, env)
    return config


def _config_error(exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    err = errors[0]
    loc = key_loc(err["loc"])
    # a value no member of a union accepts fails once per member: one message says what each wanted
    said = [e["msg"] for e in errors if key_loc(e["loc"]) == loc]
    msg = " or ".join([said[0], *(m[:1].lower() + m[1:] for m in dict.fromkeys(said[1:]) if m != said[0])])
    shown = err.get("input")
    if (
        shown is not None
        and err["type"] != "missing"
        and not isinstance(shown, dict | Secret)
        and not holds_secret(loc)
    ):
        msg = f"{msg} (got {shown!r})"
    more = len(errors) - len(said)
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    return ConfigError(msg, path=format_path(loc), code="invalid_value" if err["type"] != "missing" else "missing_key")


def key_loc(loc: tuple[int | str, ...] | list[int | str]) -> tuple[int | str, ...]:
    """The key path of a pydantic error location, without the tags pydantic adds that are not keys.

    Those are the union member it tried (``float``, ``literal['auto']``) and validator tags
    (``function-before[...]``).
    """
    annotation: Any = Config
    out: list[int | str] = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or "(" in part):
            continue
        annotation = _unwrapped(annotation)
        if typing.get_origin(annotation) in (types.UnionType, typing.Union):
            annotation = Any  # this part names the member of the union, not a key
            continue
        out.append(part)
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            annotation = field.annotation if field is not None else Any
        elif origin is dict:
            annotation = typing.get_args(annotation)[1]
        elif origin is list:
            annotation = typing.get_args(annotation)[0]
        else:
            annotation = Any
    return tuple(out)


def holds_secret(loc: tuple[int | str, ...]) -> bool:
    """Whether the value at ``loc`` is, or is inside, a key that may carry a secret (its value is never shown).

    Such keys are every ``SecretValue`` (``api_key``, ``api_keys``, ``extra_headers``, gateway keys, ...) and
    the plain-string keys a section lists in ``CREDENTIALS`` (URLs that may hold a password).
    """
    annotation: Any = Config
    for part in loc:
        annotation = _unwrapped(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return False
            if part in getattr(annotation, "CREDENTIALS", ()) or _mentions_secret(field.annotation):
                return True
            annotation = field.annotation
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        elif typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        else:
            return False
    return False


def _unwrapped(annotation: Any) -> Any:
    """``X`` from ``X | None`` (the only unions of sections and containers in the schema)."""
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def _mentions_secret(annotation: Any) -> bool:
    return annotation is Secret or any(_mentions_secret(a) for a in typing.get_args(annotation))


# --- unknown keys, with a suggestion --------------------------------------------------------------


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to ``name``, or ``""`` when none is close.

    The one suggestion of every config error and warning about a name: unknown keys, and references to profiles
    and pools that name nothing configured.
    """
    near = difflib.get_close_matches(name.strip(), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else ""


def profile_names(config: Config, *, pools: bool = True) -> list[str]:
    """What a reference may name, for :func:`did_you_mean`.

    Every profile (``family.alias``, and an alias unique across families), and with ``pools`` every pool.
    """
    full = list(config.profiles())
    aliases = [name.partition(".")[2] for name in full]
    unique = [a for a in aliases if aliases.count(a) == 1]
    return [*full, *unique, *(config.pools if pools else ())]


def check_keys(raw: Any, model: type[BaseModel], loc: tuple[int | str, ...]) -> None:
    """Raise :class:`ConfigError` for the first key ``model`` does not know, suggesting the closest one."""
    if not isinstance(raw, Mapping):
        return
    fields = model.model_fields
    for key, value in raw.items():
        if key not in fields:
            hint = did_you_mean(str(key), fields)
            raise ConfigError(f"unknown key {key!r}{hint}", path=format_path((*loc, key)), code="unknown_key")
        _check_value(value, fields[key].annotation, (*loc, key))


def _check_value(value: Any, annotation: Any, loc: tuple[int | str, ...]) -> None:
    for model in _models_in(annotation):
        check_keys(value, model, loc)
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        for arg in args:
            if arg is not type(None):
                _check_value(value, arg, loc)
        return
    if origin is dict and isinstance(value, Mapping) and len(args) == 2:
        for k, v in value.items():
            _check_value(v, args[1], (*loc, k))
    elif origin is list and isinstance(value, list) and args:
        for i, v in enumerate(value):
            _check_value(v, args[0], (*loc, i))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


# --- checks across keys ---------------------------------------------------------------------------


def resolve_profile_ref(config: Config, raw: str) -> str | None:
    """Resolve ``family.alias``, or a bare alias unique across families, to ``family.alias``."""
    ref = raw.strip()
    models = config.providers.models
    if "." in ref:
        fam, _, alias = ref.partition(".")
        return ref if alias in models.get(fam, {}) else None
    hits = [f"{fam}.{ref}" for fam, aliases in models.items() if ref in aliases]
    return hits[0] if len(hits) == 1 else None


def resolve_target_ref(config: Config, raw: str) -> str | None:
    """Resolve a reference that may name a pool too: the pool's name, else :func:`resolve_profile_ref`.

    A pool's name has no dot and is no profile's alias (checked when the config loads), so the two never clash.
    """
    ref = raw.strip()
    if ref in config.pools:
        return ref
    return resolve_profile_ref(config, ref)


def default_target(config: Config) -> str:
    """The active profile or pool when the caller names none.

    Raises:
        ConfigError: ``default_provider`` names nothing configured, or it is unset and there is not exactly
            one profile.
    """
    if config.default_provider:
        resolved = resolve_target_ref(config, config.default_provider)
        if resolved is None:
            raise ConfigError(
                f"default_provider {config.default_provider!r} does not name a configured profile or pool"
                + did_you_mean(config.default_provider, profile_names(config)),
                path="default_provider",
                code="unknown_profile",
            )
        return resolved
    return default_profile(config)


def default_profile(config: Config) -> str:
    """The active profile when the caller names none (a default that is a pool is no profile).

    Raises:
        ConfigError: ``default_provider`` names no profile (code ``default_is_pool`` when it names a pool), or
            it is unset and there is not exactly one profile.
    """
    if config.default_provider:
        resolved = resolve_profile_ref(config, config.default_provider)
        if resolved is None:
            pool = config.default_provider.strip() in config.pools
            raise ConfigError(
                f"default_provider {config.default_provider!r} "
                + (
                    "is a pool, not a profile"
                    if pool
                    else "does not name a configured profile"
                    + did_you_mean(config.default_provider, profile_names(config, pools=False))
                ),
                path="default_provider",
                code="default_is_pool" if pool else "unknown_profile",
            )
        return resolved
    names = list(config.profiles())
    if len(names) == 1:
        return names[0]
    raise ConfigError(
        "set default_provider to one of: " + ", ".join(names) if names else "no provider profiles are configured",
        path="default_provider",
        code="missing_default",
    )


def _installed(family: Family) -> bool:
    """Whether the client library of ``family``'s extra is installed (looked up, not imported)."""
    try:
        return family.extra_module is None or importlib.util.find_spec(family.extra_module) is not None
    except (ImportError, ValueError):  # the parent package is missing, or a module stub stands in for it
        return False


def _check_vertex(profile: Profile, path: str) -> None:
    """A Vertex AI profile names its project, and a ``credentials_file`` that exists."""
    if not profile.project:
        raise ConfigError(
            "a vertex profile needs project (the Google Cloud project id)", path=f"{path}.project", code="missing_key"
        )
    if not profile.publisher and not profile.model:
        raise ConfigError(
            'an unpinned vertex profile needs publisher ("anthropic" for Claude, "google" for Gemini)',
            path=f"{path}.publisher",
            code="missing_key",
        )
    if profile.region is not None and not _VERTEX_REGION.fullmatch(profile.region):
        raise ConfigError(
            f"{profile.region[:40]!r} is not a Google Cloud location (e.g. global, us-east5)",
            path=f"{path}.region",
            code="invalid_value",
        )
    if profile.credentials_file and not Path(profile.credentials_file).is_file():
        raise ConfigError("credentials file not found", path=f"{path}.credentials_file", code="file_not_found")


#: A Google Cloud location: it becomes part of the endpoint's host and of the URL path.
_VERTEX_REGION = re.compile(r"[a-z][a-z0-9-]{1,39}")


#: An AWS region name (``us-east-1``, ``eu-central-2``, ``us-gov-west-1``): it becomes part of the endpoint's host.
_AWS_REGION = re.compile(r"[a-z]{2}(-[a-z]+){1,2}-[0-9]{1,2}")


def _check_bedrock(profile: Profile, path: str) -> None:
    """A Bedrock profile needs a region, and the ``aws`` extra (botocore) to sign and decode."""
    if not profile.region:
        raise ConfigError('a bedrock profile needs region (e.g. region = "us-east-1")', path=f"{path}.region")
    if not _AWS_REGION.fullmatch(profile.region):
        raise ConfigError(
            f"{profile.region[:40]!r} is not an AWS region name", path=f"{path}.region", code="invalid_value"
        )
    if importlib.util.find_spec("botocore") is None:
        raise ConfigError(
            "a bedrock profile needs the aws extra: pip install 'turnout[aws]'", path=path, code="missing_extra"
        )


def _check_semantics(config: Config, env: Mapping[str, str]) -> None:
    """What the schema cannot check alone: profiles, pools, routes and senders against each other and the system."""
    for name, profile in config.profiles().items():
        _check_profile(name, profile)
    _check_pools(config)
    if config.profiles():
        default_target(config)
    _check_routes(config)
    for sid, sender in config.senders.items():
        if sender.provider is not None and resolve_target_ref(config, sender.provider) is None:
            raise ConfigError(
                f"provider {sender.provider!r} does not name a configured profile or pool"
                + did_you_mean(sender.provider, profile_names(config)),
                path=f"senders.{sid}.provider",
                code="unknown_profile",
            )
    if config.state.backend == "redis" and not config.state.url:
        raise ConfigError('backend = "redis" needs url = "redis://host:port/db"', path="state.url", code="missing_key")
    keys_env = config.gateway.api_keys_env
    if keys_env and not env.get(keys_env, "").strip():
        raise ConfigError(
            f"environment variable {keys_env} is {'set but empty' if keys_env in env else 'not set'}",
            path="gateway.api_keys_env",
            code="missing_env",
        )


def _check_profile(name: str, profile: Profile) -> None:
    """One profile: a known family with its extra installed, an endpoint, one way to give keys, readable files."""
    fam, _, alias = name.partition(".")
    path = f"providers.models.{fam}.{alias}"
    try:
        family = family_for(fam, profile.kind)
    except KeyError:
        raise ConfigError(
            f'unknown provider family {fam!r}; set kind (e.g. kind = "openai-compatible") and uri',
            path=f"{path}.kind",
            code="unknown_family",
        ) from None
    _check_endpoint(fam, family, profile, path)
    if family.extra is not None and not _installed(family):
        raise ConfigError(
            f"the {fam} family needs the {family.extra} extra: pip install 'turnout[{family.extra}]'",
            path=path,
            code="missing_extra",
        )
    if family.protocol == "vertex":
        _check_vertex(profile, path)
    _check_key_settings(profile, path)
    for i, m in enumerate(profile.fallback_models):
        if not isinstance(m, str):
            raise ConfigError("must be a model name", path=f"{path}.fallback_models[{i}]")
    if profile.tls_ca_cert_path and not Path(profile.tls_ca_cert_path).is_file():
        raise ConfigError(
            f"CA bundle {profile.tls_ca_cert_path!r} not found",
            path=f"{path}.tls_ca_cert_path",
            code="file_not_found",
        )


def _check_endpoint(fam: str, family: Family, profile: Profile, path: str) -> None:
    """Where a profile's calls go: a uri (http or https), the family's default, or what its vendor needs instead."""
    if family.vendor == "azure":
        if not profile.uri and not (profile.resource and profile.deployment):
            raise ConfigError(
                "an Azure OpenAI profile needs uri, or resource and deployment",
                path=f"{path}.uri",
                code="missing_uri",
            )
    elif family.protocol == "bedrock":
        _check_bedrock(profile, path)
    elif not profile.uri and not family.base_url:
        raise ConfigError(f"family {fam!r} has no default endpoint; set uri", path=f"{path}.uri", code="missing_uri")
    if profile.uri and not profile.uri.startswith(("http://", "https://")):
        raise ConfigError("uri must start with http:// or https://", path=f"{path}.uri", code="invalid_value")


def _check_key_settings(profile: Profile, path: str) -> None:
    """A profile gives its key one way: a rotation pool (api_keys), the key itself (api_key) or its variable."""
    if profile.api_keys and (profile.api_key is not None or profile.api_key_env):
        raise ConfigError(
            "set either api_keys (a rotation pool) or api_key/api_key_env, not both",
            path=f"{path}.api_keys",
            code="conflicting_keys",
        )
    if profile.api_key is not None and profile.api_key_env:
        raise ConfigError(
            "set either api_key or api_key_env, not both",
            path=f"{path}.api_key_env",
            code="conflicting_keys",
        )


def _check_routes(config: Config) -> None:
    seen: dict[str, int] = {}
    for i, route in enumerate(config.model_routes):
        path = f"model_routes[{i}]"
        if not route.hint.strip():
            raise ConfigError("hint must not be blank", path=f"{path}.hint", code="blank_hint")
        if route.hint in seen:
            raise ConfigError(
                f"duplicate hint {route.hint!r} (also model_routes[{seen[route.hint]}]); each hint must be unique",
                path=f"{path}.hint",
                code="duplicate_hint",
            )
        seen[route.hint] = i
        target = route.model_provider.strip()
        if not target:
            raise ConfigError("model_provider must not be blank", path=f"{path}.model_provider", code="invalid_route")
        if target in config.pools:
            if route.api_key is not None:
                raise ConfigError(
                    f"model_provider {target!r} is a pool: set the keys on its member profiles, not on the route",
                    path=f"{path}.api_key",
                    code="route_key_on_pool",
                )
        else:
            fam, dot, alias = target.partition(".")
            if not dot or not fam or not alias:
                raise ConfigError(
                    f"model_provider {target!r} must be written <family>.<alias>, or name a pool"
                    + did_you_mean(target, [*config.profiles(), *config.pools]),
                    path=f"{path}.model_provider",
                    code="invalid_route",
                )
            if resolve_profile_ref(config, target) is None:
                raise ConfigError(
                    f"model_provider {target!r} does not name a configured profile"
                    + did_you_mean(target, profile_names(config)),
                    path=f"{path}.model_provider",
                    code="unknown_route_target",
                )
        if not route.model.strip():
            raise ConfigError("model must not be blank", path=f"{path}.model", code="invalid_route")


def _check_pools(config: Config) -> None:
    """Every pool: a usable name, at least one member, members that are distinct profiles, weights of members."""
    aliases = {name.partition(".")[2]: name for name in config.profiles()}
    for name, pool in config.pools.items():
        path = f"pools.{name}" if _POOL_NAME.fullmatch(name) else f"pools.{name!r}"
        if not _POOL_NAME.fullmatch(name):
            raise ConfigError(
                f"pool name {name!r} must be 1 to 64 letters, digits, '-' or '_'", path=path, code="invalid_pool_name"
            )
        if name in aliases:
            raise ConfigError(
                f"pool {name!r} has the alias of profile {aliases[name]}: a reference to {name!r} would be ambiguous",
                path=path,
                code="pool_name_conflict",
            )
        if not pool.members:
            raise ConfigError("a pool needs at least one member", path=f"{path}.members", code="empty_pool")
        members = _check_pool_members(config, name, pool, path)
        _check_pool_weights(config, name, pool, path, members)


def _check_pool_members(config: Config, name: str, pool: Pool, path: str) -> dict[str, int]:
    """Each member names a profile (not a pool) at most once; returns each member profile's index in the list."""
    seen: dict[str, int] = {}
    listed = {ref for m in pool.members for ref in (m.strip(), resolve_profile_ref(config, m))}
    for i, raw in enumerate(pool.members):
        where = f"{path}.members[{i}]"
        ref = raw.strip()
        if ref in config.pools:
            nested = "a pool cannot be a member of itself" if ref == name else f"{ref!r} is a pool; pools do not nest"
            raise ConfigError(f"{nested} (name its profiles instead)", path=where, code="nested_pool")
        member = resolve_profile_ref(config, ref)
        if member is None:
            raise ConfigError(
                f"member {raw!r} does not name a configured profile"
                + did_you_mean(raw, [n for n in profile_names(config, pools=False) if n not in listed]),
                path=where,
                code="unknown_pool_member",
            )
        if member in seen:
            raise ConfigError(f"{member} is already members[{seen[member]}]", path=where, code="duplicate_pool_member")
        seen[member] = i
    return seen


def _check_pool_weights(config: Config, name: str, pool: Pool, path: str, members: dict[str, int]) -> None:
    """Each weight belongs to a member, once; when every member has one, at least one is positive."""
    weighted: dict[str, str] = {}
    for key in pool.weights:
        where = f"{path}.weights." + (f'"{key}"' if "." in key else key)
        member = resolve_profile_ref(config, key)
        if member is None or member not in members:
            raise ConfigError(
                f"{key!r} is not a member of pool {name}" + did_you_mean(key, pool.members),
                path=where,
                code="unknown_pool_weight",
            )
        if member in weighted:
            raise ConfigError(
                f"{member} already has a weight (as {weighted[member]!r})", path=where, code="duplicate_pool_weight"
            )
        weighted[member] = key
    if len(weighted) == len(members) and not any(pool.weights.values()):
        raise ConfigError(
            "every member has weight 0: at least one needs a positive weight",
            path=f"{path}.weights",
            code="invalid_pool_weights",
        )
