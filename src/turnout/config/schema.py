"""The ``turnout.toml`` schema (pydantic v2).

Names follow ZeroClaw's (``model_routes``, ``model_provider``, ``fallback_models``, ``fallback``,
``provider_retries``, ``provider_backoff_ms``, ``uri``, ``extra_headers``, ``timeout_secs``) so a
ZeroClaw provider section loads as is. Keys ZeroClaw knows but Turnout does not act on are listed in
``UNSUPPORTED`` of each model: they load with a warning. Any other unknown key is an error.

Every section validates strictly: a value of the wrong type (a string where a number or a boolean belongs)
is an error naming its key path, never converted.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from turnout.core.secrets import Secret

#: A browser origin: ``scheme://host`` with an optional port, nothing after it.
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,252})|[0-9A-Fa-f:.]{2,45}")
_ORIGIN = re.compile(r"https?://([A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\])(:[0-9]{1,5})?")


def _to_secret(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, Secret) or value is None:
        return value
    if isinstance(value, str):
        env = (info.context or {}).get("env", {})
        return Secret.parse(value, env)
    raise ValueError('must be a string: the secret itself or "${ENV_NAME}"')


SecretValue = Annotated[Secret, BeforeValidator(_to_secret)]

#: The longest a timeout may be, in seconds (a day): every asyncio and aiohttp deadline made from one stays a
#: finite, representable time (``inf`` or ``1e308`` would fail every call with an ``OverflowError``).
MAX_SECS = 86_400.0
#: The highest price, USD per million tokens.
MAX_PRICE = 1_000_000.0
#: The highest spend limit, USD.
MAX_USD = 1_000_000_000.0

#: Every float setting of the schema is one of these: finite (no ``inf``, no ``nan``), each with an upper bound of
#: its own (``Field(le=...)`` where it is used, or built into the type).
Finite = Annotated[float, Field(allow_inf_nan=False)]
#: A timeout: above 0 and at most :data:`MAX_SECS`.
Seconds = Annotated[float, Field(gt=0, le=MAX_SECS, allow_inf_nan=False)]
#: A price, USD per million tokens: 0 to :data:`MAX_PRICE`.
Price = Annotated[float, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)]
#: A spend limit, USD: above 0 and at most :data:`MAX_USD`.
Usd = Annotated[float, Field(gt=0, le=MAX_USD, allow_inf_nan=False)]

#: An HTTP header name: a token (RFC 9110, section 5.1).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: What a header value cannot hold: control characters but tab (a CR or LF would end the header) and DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _header_name(name: str) -> str:
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"{name[:64]!r} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)")
    return name


def _header_value(value: Secret) -> Secret:
    # the value may be a credential: the message never shows it
    if _CONTROL.search(value.reveal()):
        raise ValueError("a header value cannot hold CR, LF or other control characters")
    return value


#: The name of a header sent as configured (``extra_headers``, ``[telemetry] headers``).
HeaderName = Annotated[str, AfterValidator(_header_name)]
#: Its value: a secret (literal or ``"${ENV_NAME}"``) that can be sent as one header line.
HeaderValue = Annotated[Secret, BeforeValidator(_to_secret), AfterValidator(_header_value)]


class _Section(BaseModel):
    # strict: a value of the wrong type is an error, never coerced (``provider_retries = "1"``, ``enabled = 1``),
    # for every key of every section, also those added later. TOML integers still fill float keys.
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True, strict=True)

    #: Keys accepted for ZeroClaw compatibility that Turnout ignores (loaded with a warning).
    UNSUPPORTED: ClassVar[frozenset[str]] = frozenset()
    #: Plain-string keys that may carry a credential (a URL with a password): their values are never shown in
    #: an error. Every ``SecretValue`` key is treated so without being listed.
    CREDENTIALS: ClassVar[frozenset[str]] = frozenset()


class Pricing(_Section):
    """USD per million tokens."""

    input: Price
    output: Price
    cached_input: Price | None = None
    cache_write: Price | None = None


class Profile(_Section):
    """One configured endpoint: ``[providers.models.<family>.<alias>]``."""

    UNSUPPORTED: ClassVar[frozenset[str]] = frozenset(
        {
            "requires_openai_auth",
            "replay_assistant_reasoning",
            "live_pricing",
            "auth_mode",
            "endpoint",
            "temperature_override",
        }
    )
    CREDENTIALS: ClassVar[frozenset[str]] = frozenset({"uri"})

    kind: str | None = None
    uri: str | None = None
    api_key: SecretValue | None = None
    api_key_env: str | None = None
    api_keys: list[SecretValue] = Field(default_factory=list)
    model: str | None = None
    fallback_models: list[str] = Field(default_factory=list)
    fallback: list[str] = Field(default_factory=list)
    extra_headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict)
    timeout_secs: Seconds = 120.0
    connect_timeout_secs: Seconds = 10.0
    first_token_timeout_secs: Seconds = 60.0
    idle_timeout_secs: Seconds = 60.0
    context_window: int | None = Field(default=None, gt=0)
    native_tools: bool | None = None
    vision: bool | None = None
    structured_output: bool | None = None
    streaming: bool | None = None
    refusal_fallback: bool = False
    breaker: Breaker | None = None
    hedge: Hedge | None = None
    pricing: Pricing | None = None
    temperature: Finite | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    wire_api: Literal["responses", "chat_completions"] | None = None
    provider_extra: dict[str, Any] = Field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] | None = None
    merge_system_into_user: bool = False
    tls_ca_cert_path: str | None = None
    max_response_bytes: int = Field(default=32 * 1024 * 1024, gt=1024)
    # Azure OpenAI
    resource: str | None = None
    deployment: str | None = None
    api_version: str | None = None
    # Google Vertex AI (``region`` defaults to ``global``; ``publisher`` to the model's: Claude → anthropic)
    project: str | None = Field(default=None, min_length=1, max_length=128)
    credentials_file: str | None = None
    publisher: Literal["anthropic", "google"] | None = None
    # AWS Bedrock and Google Vertex AI
    region: str | None = None
    aws_profile: str | None = None
    # Ollama
    think: bool | None = None
    num_ctx: int | None = Field(default=None, gt=0)
    num_predict: int | None = None
    # accepted with a warning (see UNSUPPORTED)
    requires_openai_auth: Any = None
    replay_assistant_reasoning: Any = None
    live_pricing: Any = None
    auth_mode: Any = None
    endpoint: Any = None
    temperature_override: Any = None

    _env_key: Secret | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _resolve_key_env(self, info: ValidationInfo) -> Profile:
        if self.api_key_env:
            self._env_key = Secret.from_env(self.api_key_env, (info.context or {}).get("env", {}))
        return self

    @property
    def env_key(self) -> Secret | None:
        """The key read from ``api_key_env`` when the config loaded (None without ``api_key_env``)."""
        return self._env_key

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str | None) -> str | None:
        from turnout.core.registry import KINDS

        if v is not None and v not in KINDS:
            raise ValueError(f"unknown kind {v!r}; expected one of {', '.join(sorted(KINDS))}")
        return v


class ProvidersSection(_Section):
    """``[providers]``: profiles under ``models.<family>.<alias>``."""

    models: dict[str, dict[str, Profile]] = Field(default_factory=dict)


class ModelRoute(_Section):
    """One ``[[model_routes]]`` item: ``hint:<hint>`` → ``model_provider`` + ``model``."""

    hint: str
    model_provider: str
    model: str
    api_key: SecretValue | None = None


class Breaker(_Section):
    """A circuit breaker's settings: ``[reliability.breaker]``, or a profile's ``breaker`` table (its keys win).

    A key left out keeps the value of the level above (the profile's: ``[reliability.breaker]``'s; that one's:
    the defaults of :class:`turnout.walk.breaker.BreakerSettings`). ``min_attempts`` is the former name of
    ``min_calls`` (the breaker now counts calls, one per call, not tries); ``min_calls`` wins when both are set.
    """

    enabled: bool | None = None
    failures: int | None = Field(default=None, ge=1, le=1000)
    window_secs: Finite | None = Field(default=None, gt=0, le=3600)
    min_calls: int | None = Field(default=None, ge=1, le=100_000)
    min_attempts: int | None = Field(default=None, ge=1, le=100_000)
    failure_rate: Finite | None = Field(default=None, gt=0, le=1)
    open_secs: Finite | None = Field(default=None, gt=0, le=3600)
    max_open_secs: Finite | None = Field(default=None, gt=0, le=86_400)

    def settings(self) -> dict[str, Any]:
        """The keys this table sets (``min_attempts`` given as ``min_calls``)."""
        values = {k: v for k, v in self.model_dump().items() if v is not None}
        former = values.pop("min_attempts", None)
        if former is not None:
            values.setdefault("min_calls", former)
        return values


class Hedge(_Section):
    """Hedged requests: ``[reliability.hedge]``, or a profile's ``hedge`` table (its keys win).

    A key left out keeps the value of the level above (the profile's: ``[reliability.hedge]``'s; that one's:
    the defaults of :class:`turnout.walk.hedge.HedgeSettings`).
    """

    enabled: bool | None = None
    after_ms: Finite | Literal["auto"] | None = Field(default=None)
    budget: Finite | None = Field(default=None, ge=0, le=1)
    burst: Finite | None = Field(default=None, ge=1, le=1000)
    other_keys: bool | None = None

    @field_validator("after_ms")
    @classmethod
    def _positive(cls, value: float | str | None) -> float | str | None:
        if isinstance(value, int | float) and not 0 < value <= 600_000:
            raise ValueError('after_ms must be above 0 and at most 600000, or "auto"')
        return value

    def settings(self) -> dict[str, Any]:
        """The keys this table sets."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class AffinitySettings(_Section):
    """``[reliability.affinity]``: conversations go back to the pool member that served them last."""

    enabled: bool = True
    ttl_secs: Finite = Field(default=300.0, gt=0, le=86_400)
    max_conversations: int = Field(default=10_000, ge=1, le=10_000_000)


class Reliability(_Section):
    """``[reliability]``: retries, backoff, the shared key pool, circuit breakers, hedging and affinity."""

    UNSUPPORTED: ClassVar[frozenset[str]] = frozenset(
        {
            "channel_initial_backoff_secs",
            "channel_max_backoff_secs",
            "scheduler_poll_secs",
            "scheduler_retries",
            "fallback_providers",
            "model_fallbacks",
        }
    )

    provider_retries: int = Field(default=2, ge=0, le=20)
    provider_backoff_ms: int = Field(default=500, ge=0, le=10_000)
    api_keys: list[SecretValue] = Field(default_factory=list)
    breaker: Breaker = Field(default_factory=Breaker)
    hedge: Hedge = Field(default_factory=Hedge)
    affinity: AffinitySettings = Field(default_factory=AffinitySettings)
    channel_initial_backoff_secs: Any = None
    channel_max_backoff_secs: Any = None
    scheduler_poll_secs: Any = None
    scheduler_retries: Any = None
    fallback_providers: Any = None
    model_fallbacks: Any = None


class Sender(_Section):
    """``[senders.<id>]``: a per-sender override of the profile and/or model."""

    provider: str | None = None
    model: str | None = None


class Notices(_Section):
    """``[notices]``: which fallbacks are announced."""

    intra_family: bool = False


class Ledger(_Section):
    """``[ledger]``: where attempts are persisted."""

    enabled: bool = True
    path: str = "turnout-ledger.sqlite3"


#: A SHA-256 digest as 64 hex digits (upper case is accepted and read as lower case).
_SHA256_HEX = re.compile(r"[0-9A-Fa-f]{64}")


def _sha256_hex(value: str) -> str:
    # the value may be a key pasted by mistake: the message never shows it (the keys are listed in CREDENTIALS)
    if not _SHA256_HEX.fullmatch(value):
        raise ValueError("must be a SHA-256 digest: 64 hex digits (turnout key hash prints a key's)")
    return value.lower()


#: The SHA-256 of a client key, in hex (``key_sha256``, ``api_key_hashes``): stored instead of the key itself.
Sha256Hex = Annotated[str, AfterValidator(_sha256_hex)]


class GatewayKey(_Section):
    """``[gateway.keys.<name>]``: one client key (the key itself, or its SHA-256) and what it may use."""

    CREDENTIALS: ClassVar[frozenset[str]] = frozenset({"key_sha256"})

    key: SecretValue | None = None
    key_sha256: Sha256Hex | None = None
    models: list[str] | None = None
    sender: str | None = None
    daily_limit_usd: Usd | None = None
    max_call_usd: Usd | None = None
    rpm: int | None = Field(default=None, gt=0)
    tpm: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_key(self) -> GatewayKey:
        # the error names the table (gateway.keys.<name>), never a value
        if self.key is not None and self.key_sha256 is not None:
            raise ValueError("set key or key_sha256 (the key's SHA-256), not both")
        if self.key is None and self.key_sha256 is None:
            raise ValueError("a client key needs key (the key) or key_sha256 (its SHA-256)")
        return self


class Gateway(_Section):
    """``[gateway]``: the HTTP gateway's clients, what they may use, and its connection limits."""

    CREDENTIALS: ClassVar[frozenset[str]] = frozenset({"api_key_hashes"})

    api_keys: list[SecretValue] = Field(default_factory=list)
    api_keys_env: str | None = None
    api_key_hashes: list[Sha256Hex] = Field(default_factory=list)
    keys: dict[str, GatewayKey] = Field(default_factory=dict)
    aliases: dict[str, str] = Field(default_factory=dict)
    model_aliases: dict[str, str] = Field(default_factory=dict)
    allow_any_model: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    header_timeout_secs: Seconds = 10.0
    idle_timeout_secs: Seconds = 75.0
    body_timeout_secs: Seconds = 30.0
    max_connections: int = Field(default=1024, ge=2)
    drain_secs: Finite = Field(default=25.0, gt=0, le=3600)
    cors_origins: list[str] = Field(default_factory=list)
    on_ledger_failure: Literal["closed", "open"] = "closed"
    #: How long a Responses conversation stays nameable by ``previous_response_id`` (at most 30 days).
    responses_ttl_secs: Finite = Field(default=3600.0, gt=0, le=30 * 86400)
    #: The most input and output items a kept Responses conversation holds.
    responses_max_items: int = Field(default=1000, gt=0, le=100_000)
    #: The most bytes (as JSON) a kept Responses conversation holds.
    responses_max_bytes: int = Field(default=4 * 1024 * 1024, gt=0, le=64 * 1024 * 1024)
    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for host in value:
            if host != "*" and not _HOST.fullmatch(host):
                raise ValueError(f"{host[:80]!r} is not a host name or address (no scheme, port or path; or '*')")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], or '*')")
        return value


class State(_Section):
    """``[state]``: where cooldown and key state lives."""

    CREDENTIALS: ClassVar[frozenset[str]] = frozenset({"url"})

    backend: Literal["memory", "redis"] = "memory"
    url: str | None = None
    key_prefix: str = "turnout:"


PoolStrategy = Literal["ordered", "weighted", "least_busy", "latency"]


class Pool(_Section):
    """``[pools.<name>]``: interchangeable profiles, standing wherever a profile can (see :mod:`turnout.walk.pools`).

    Whether the members, weights and fallbacks name what is configured is checked when the config loads
    (:func:`turnout.config.loader.load_config_dict`), with the key path.
    """

    members: list[str]
    strategy: PoolStrategy = "weighted"
    weights: dict[str, Annotated[Finite, Field(ge=0, le=1_000_000)]] = Field(default_factory=dict)
    explore: Finite = Field(default=0.05, ge=0, le=0.5)
    fallback: list[str] = Field(default_factory=list)


class Telemetry(_Section):
    """``[telemetry]``: OpenTelemetry spans for every call and attempt (needs the ``otel`` extra).

    A key left out falls back to the standard ``OTEL_*`` variable that the OpenTelemetry SDK reads (see
    docs/observability.md); a key set here wins over it.
    """

    CREDENTIALS: ClassVar[frozenset[str]] = frozenset({"endpoint"})

    enabled: bool = False
    exporter: Literal["otlp", "console", "none"] | None = None
    endpoint: str | None = None
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict)
    service_name: str | None = Field(default=None, min_length=1, max_length=256)
    capture_content: bool = False
    max_content_chars: int = Field(default=4096, ge=16, le=1_000_000)

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL of an OTLP/HTTP collector")
        return value


class Embeddings(_Section):
    """``[embeddings]``: which model names produce one vector space (see docs/embeddings.md).

    ``spaces`` maps a space's name to the model names that make its vectors, e.g. one model under two vendors'
    names; a model named nowhere is a space of its own. A name may belong to one space only.
    """

    spaces: dict[str, list[Annotated[str, Field(min_length=1, max_length=256)]]] = Field(default_factory=dict)

    @field_validator("spaces")
    @classmethod
    def _one_space_each(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        seen: dict[str, str] = {}
        for space, models in value.items():
            if not space.strip():
                raise ValueError("a space's name cannot be blank")
            for model in models:
                if not model.strip():
                    raise ValueError(f"space {space!r} lists a blank model name")
                if model in seen and seen[model] != space:
                    raise ValueError(f"model {model!r} is listed in two spaces ({seen[model]!r} and {space!r})")
                seen[model] = space
        return value

    def space_names(self) -> dict[str, str]:
        """Each listed model name (without Gemini's ``models/``) → the name of its space."""
        return {m.removeprefix("models/"): space for space, models in self.spaces.items() for m in models}


class Config(_Section):
    """The whole ``turnout.toml``."""

    default_provider: str | None = None
    default_model: str | None = None
    providers: ProvidersSection = Field(default_factory=ProvidersSection)
    model_routes: list[ModelRoute] = Field(default_factory=list)
    reliability: Reliability = Field(default_factory=Reliability)
    senders: dict[str, Sender] = Field(default_factory=dict)
    notices: Notices = Field(default_factory=Notices)
    ledger: Ledger = Field(default_factory=Ledger)
    gateway: Gateway = Field(default_factory=Gateway)
    state: State = Field(default_factory=State)
    pools: dict[str, Pool] = Field(default_factory=dict)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    embeddings: Embeddings = Field(default_factory=Embeddings)

    def profiles(self) -> dict[str, Profile]:
        """Every profile by its ``family.alias`` name, in file order."""
        return {f"{fam}.{alias}": p for fam, aliases in self.providers.models.items() for alias, p in aliases.items()}


# Profile names Breaker and Hedge before they are defined; resolving them now makes its ``model_fields`` show the
# classes, which the key paths of config errors are read from (``turnout.config.loader.key_loc``).
Profile.model_rebuild(force=True)
