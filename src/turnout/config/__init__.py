"""Configuration: the ``turnout.toml`` schema, loading, secrets and the fallback graph."""

from turnout.config.graph import (
    MAX_FALLBACK_DEPTH,
    ConfigWarning,
    EntrySpec,
    Plan,
    PoolSpec,
    Route,
    build_plan,
    collect_warnings,
    materialize,
    pool_specs,
    profile_credentials,
)
from turnout.config.loader import (
    default_profile,
    default_target,
    find_config_path,
    load_config_dict,
    load_config_file,
    load_config_toml,
    resolve_profile_ref,
    resolve_target_ref,
)
from turnout.config.schema import Config, ModelRoute, Pool, Pricing, Profile
from turnout.core.secrets import Secret, key_id

__all__ = [
    "MAX_FALLBACK_DEPTH",
    "Config",
    "ConfigWarning",
    "EntrySpec",
    "ModelRoute",
    "Plan",
    "Pool",
    "PoolSpec",
    "Pricing",
    "Profile",
    "Route",
    "Secret",
    "build_plan",
    "collect_warnings",
    "default_profile",
    "default_target",
    "find_config_path",
    "key_id",
    "load_config_dict",
    "load_config_file",
    "load_config_toml",
    "materialize",
    "pool_specs",
    "profile_credentials",
    "resolve_profile_ref",
    "resolve_target_ref",
]
