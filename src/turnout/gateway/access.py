"""Who may use what through the gateway: client keys, public model names, bound senders and daily spend.

The operator decides. A request's ``model`` must be a name its key may use:

- by default, what ``GET /v1/models`` lists: every ``hint:<name>``, every alias of ``[gateway.aliases]`` and
  ``[gateway.model_aliases]``, every profile that is not only another profile's fallback or a pool's member, and
  the default profile's models. A pinned profile serves its pin: ``family.alias/<model>`` reaches only a profile
  without a ``model``, and a plain model reaches the default profile only when it is unpinned;
- a ``[gateway.model_aliases]`` name with a glob (``*``, ``?``, ``[``: ``claude-*``, ``gpt-5*``) is a pattern: a
  model no exact name matches goes where the first matching pattern (in the file's order) points, before any
  other rule (coding agents send model names of their own, and the operator decides where they go); a pattern
  naming a profile without a pinned ``model`` sends the client's name to it;
- with ``[gateway.keys.<name>] models = [...]``, only the names listed there;
- with ``allow_any_model = true``, anything (the open routing of :func:`route_choice`).

Anything else is a 404 ``model_not_found``. A ``[senders.<id>]`` tier applies only as a key's bound
``sender``: what a client sends as ``user`` or ``metadata.user_id`` never selects one. A key's
``daily_limit_usd`` is enforced from the ledger (:mod:`turnout.gateway.spend`): once spent, 429. A key with a
spend limit (``daily_limit_usd``, ``max_call_usd``) may not reach a model without a known price (neither the
profile's ``pricing`` nor the catalogue's): what such a call costs could not be counted, so it is a 400
``model_unpriced`` before anything is sent. That is decided on the call's own route, where its worst case is
reserved (:meth:`Access.reserve`, :class:`~turnout.gateway.spend.WorstCase`), and ``turnout check`` warns about the
keys and names that reach one, routing them as calls are routed (:meth:`Access.check`).

Everything is computed when the gateway starts; admitting a request costs a dict lookup.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Literal, Protocol, TypeAlias

import orjson

from turnout.config import (
    Config,
    ConfigWarning,
    Profile,
    default_profile,
    default_target,
    materialize,
    resolve_profile_ref,
)
from turnout.config.loader import did_you_mean
from turnout.config.schema import GatewayKey
from turnout.core.errors import ConfigError
from turnout.core.money import usd
from turnout.core.secrets import digest_key_id
from turnout.gateway.bounds import MAX_MODEL_CHARS
from turnout.gateway.failures import Failure, RequestRejected, invalid
from turnout.gateway.shared_spend import SharedBusy, SharedUnavailable
from turnout.gateway.spend import Hold, SpendBook, WorstCase, seconds_to_midnight, unpriced_entries
from turnout.ledger.pricing import FAMILY_CATALOGUE_IDS
from turnout.providers import model_problem
from turnout.walk.router import HINT_PREFIX, Target

NameKind: TypeAlias = Literal["hint", "alias", "profile", "model"]
#: What makes a ``[gateway.model_aliases]`` name a pattern.
_GLOB = frozenset("*?[")
#: The name of the caller of a gateway without client keys.
ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """What the request's ``model`` selects: ``client.chat(model=..., provider=...)`` arguments."""

    model: str | None
    provider: str | None


def route_choice(config: Config, raw: str | None) -> RouteChoice:
    """Read the request's ``model``.

    - ``hint:<name>`` → that route (the router resolves it);
    - ``family.alias`` naming a configured profile → that profile, with its own model;
    - ``family.alias/<model>`` → that profile with ``<model>`` (for profiles without a pinned model);
    - anything else (``gpt-4.1``, which also has a dot) → a plain model for the default profile;
    - empty → the default profile's own model.
    """
    if not raw:
        return RouteChoice(None, None)
    if raw.startswith(HINT_PREFIX):
        return RouteChoice(raw, None)
    head, slash, rest = raw.partition("/")
    if "." in head and resolve_profile_ref(config, head) == head:
        return RouteChoice(rest if slash and rest else None, head)
    return RouteChoice(raw, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicName:
    """A name a client may put in ``model``, and where it goes.

    Attributes:
        id: The name as the client writes it.
        kind: ``hint``, ``alias``, ``profile`` or ``model`` (one of the default profile's models).
        choice: The route it selects.
        provider: The profile it starts at.
        model: The model it serves (None: a profile without a pinned model; the client names one after ``/``).
    """

    id: str
    kind: NameKind
    choice: RouteChoice
    provider: str
    model: str | None


@dataclass(frozen=True, slots=True)
class ClientKey:
    """A configured client key as the gateway keeps it: never the key, only its SHA-256.

    Attributes:
        path: Where it is configured (``gateway.api_keys[0]``, ``gateway.keys.<name>.key_sha256``), for errors.
        digest: The SHA-256 digest of the key (32 bytes).
    """

    path: str
    digest: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """An authenticated client and everything its key allows, resolved at start-up.

    Attributes:
        name: How logs and the ledger name it: the ``[gateway.keys.<name>]`` name, else the key id.
        names: The public names it may use, by id (what its ``/v1/models`` lists).
        open_profiles: Profiles without a pinned model whose model it may choose (``family.alias/<model>``).
        sender: The bound ``[senders.<id>]`` tier, if any.
        daily_limit_usd: Its daily spend limit, if any.
        max_call_usd: The most one of its calls may reserve (its worst case), if bounded.
        rpm: The most requests it may start per minute, if bounded.
        tpm: The most tokens (input and output) its calls may use per minute, if bounded.
        default_route: Whether an empty ``model`` (the default route) is open to it: with the default access, or
            when its names reach the default target (the default profile or one of its models; a hint to a
            default pool).
        models_json: Its ``/v1/models`` bodies, OpenAI and Anthropic shapes, encoded once.
        admitted: What a request for each of its names is admitted as (made once, not per request).
        patterns: The ``[gateway.model_aliases]`` patterns it may use, in order: ``(pattern, name)``.
    """

    name: str
    names: Mapping[str, PublicName]
    open_profiles: frozenset[str]
    sender: str | None = None
    daily_limit_usd: float | None = None
    max_call_usd: float | None = None
    rpm: int | None = None
    tpm: int | None = None
    default_route: bool = True
    models_json: tuple[bytes, bytes] = field(default=(b"", b""), repr=False)
    patterns: Sequence[tuple[str, PublicName]] = ()
    admitted: Mapping[str, Admitted] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        admitted = {n: Admitted(p.choice.model, p.choice.provider, self.sender) for n, p in self.names.items()}
        object.__setattr__(self, "admitted", admitted)

    @property
    def limited(self) -> bool:
        """Whether its calls reserve their worst case first: it has a daily limit, a per-call bound, rpm or tpm."""
        return any(x is not None for x in (self.daily_limit_usd, self.max_call_usd, self.rpm, self.tpm))

    @property
    def spend_limited(self) -> bool:
        """Whether its spend is bounded (``daily_limit_usd`` or ``max_call_usd``).

        Every model such a key reaches needs a known price (``rpm`` and ``tpm`` count requests and tokens, whatever
        they cost).
        """
        return self.daily_limit_usd is not None or self.max_call_usd is not None


@dataclass(frozen=True, slots=True)
class Admitted:
    """What a request may do: ``client.chat(model=..., provider=..., sender=...)`` arguments."""

    model: str | None
    provider: str | None
    sender: str | None


class Routes(Protocol):
    """What routes a call's options to its target: :meth:`turnout.client.Client.route` (the gateway's client)."""

    def route(self, *, model: str | None = None, provider: str | None = None, sender: str | None = None) -> Target:
        """The target a call with these options goes to (see ``Client.route``).

        Raises:
            ConfigError: The options route nowhere (the call fails the same way, spending nothing).
        """
        ...


class Access:
    """The gateway's rules over one configuration (see the module docstring).

    Args:
        config: The loaded configuration.
        spend: The daily spend book (None: limits cannot be enforced; the gateway refuses keys with one).

    Raises:
        ConfigError: An alias, a key's ``models`` or ``sender`` does not name something configured (the
            message names the key path).
    """

    def __init__(self, config: Config, spend: SpendBook | None = None) -> None:
        self.config = config
        self.spend = spend
        #: Refuse limited keys while the ledger cannot record (``[gateway] on_ledger_failure = "closed"``).
        self.fail_closed = config.gateway.on_ledger_failure == "closed"
        #: Refused calls of limited keys, per (key name, reason) (``turnout_key_rejections_total``).
        self.rejections: Counter[tuple[str, str]] = Counter()
        self.allow_any_model = config.gateway.allow_any_model
        self._profiles = config.profiles()
        try:
            self._default: str | None = default_profile(config)
        except ConfigError:
            self._default = None
        try:
            self._target: str | None = default_target(config)
        except ConfigError:
            self._target = None
        self._primary = (self.config.default_model or self._profiles[self._default].model) if self._default else None
        self.patterns: list[tuple[str, PublicName]] = []
        self.universe = self._universe()
        self._receivers: dict[str, tuple[tuple[str, Profile], ...]] = {
            name: self._receivers_of(name) for name in self._profiles
        }
        hidden = self._fallback_only()
        self.default_names = {n.id: n for n in self.universe.values() if n.kind != "profile" or n.id not in hidden}

    # --- the table of names ------------------------------------------------------------------

    def _universe(self) -> dict[str, PublicName]:
        """Every name a key may be given: hints, aliases, every profile, the default profile's models."""
        out: dict[str, PublicName] = {}
        for r in self.config.model_routes:
            target = resolve_profile_ref(self.config, r.model_provider) or r.model_provider
            hint = HINT_PREFIX + r.hint
            served = self._pin(target) or r.model  # a pinned target ignores the route's model
            out[hint] = PublicName(id=hint, kind="hint", choice=RouteChoice(hint, None), provider=target, model=served)
        for name, profile in self._profiles.items():
            pin = self._pin(name)
            choice = RouteChoice(pin if pin != profile.model else None, name)  # default_model, also when named
            out[name] = PublicName(id=name, kind="profile", choice=choice, provider=name, model=pin)
        if self._default is not None:
            p = self._profiles[self._default]
            for model in (self.config.default_model or p.model, *p.fallback_models):
                if model and model.strip() and model not in out:
                    # the profile is named too, so a bound sender's tier cannot move the model elsewhere
                    choice = RouteChoice(model, self._default)
                    out[model] = PublicName(id=model, kind="model", choice=choice, provider=self._default, model=model)
        for table in ("aliases", "model_aliases"):
            for alias, target in getattr(self.config.gateway, table).items():
                path = f"gateway.{table}.{alias}"
                if table == "model_aliases" and _GLOB.intersection(alias):
                    if any(alias == p for p, _ in self.patterns):
                        raise ConfigError(f"pattern {alias!r} is listed twice", path=path, code="duplicate_name")
                    self.patterns.append((alias, self._alias(alias, target, out, path)))
                else:
                    out[alias] = self._alias(alias, target, out, path)
        return out

    def _alias(self, alias: str, target: str, known: Mapping[str, PublicName], path: str) -> PublicName:
        if not alias.strip() or len(alias) > MAX_MODEL_CHARS or not alias.isprintable():
            raise ConfigError("an alias must be 1 to 256 printable characters", path=path, code="invalid_alias")
        if alias.startswith(HINT_PREFIX) or alias in known:
            raise ConfigError(
                f"alias {alias!r} is already a {known[alias].kind if alias in known else 'hint'} name",
                path=path,
                code="duplicate_name",
            )
        if target.startswith(HINT_PREFIX):
            hint = known.get(target)
            if hint is None or hint.kind != "hint":
                hints = [n for n, named in known.items() if named.kind == "hint"]
                raise ConfigError(
                    f"{target!r} is not a configured route hint" + did_you_mean(target, hints),
                    path=path,
                    code="unknown_route_target",
                )
            return PublicName(id=alias, kind="alias", choice=hint.choice, provider=hint.provider, model=hint.model)
        if target in self.config.pools:
            return PublicName(id=alias, kind="alias", choice=RouteChoice(None, target), provider=target, model=None)
        head, slash, model = target.partition("/")
        profile = resolve_profile_ref(self.config, head)
        if profile is None or (slash and not model.strip()):
            raise ConfigError(
                f"{target!r} must be hint:<name>, a pool, <family.alias> or <family.alias>/<model> of a configured "
                "profile",
                path=path,
                code="unknown_route_target",
            )
        if slash:
            return PublicName(id=alias, kind="alias", choice=RouteChoice(model, profile), provider=profile, model=model)
        named = known[profile]
        return PublicName(id=alias, kind="alias", choice=named.choice, provider=profile, model=named.model)

    def _fallback_only(self) -> set[str]:
        """Profiles named in a ``fallback`` or as a pool member that are neither the default nor a route target."""
        refs = [ref for p in self._profiles.values() for ref in p.fallback]
        refs += [ref for pool in self.config.pools.values() for ref in (*pool.members, *pool.fallback)]
        named = {resolve_profile_ref(self.config, ref) for ref in refs if ref.strip()}
        targets = {n.provider for n in self.universe.values() if n.kind in ("hint", "alias")}
        return {p for p in named if p is not None and p != self._default and p not in targets}

    def _receivers_of(self, root: str) -> tuple[tuple[str, Profile], ...]:
        """The profiles that receive a model a client names for ``root``: it, and its unpinned fallbacks."""
        try:
            entries = materialize(self.config, root, model_override="m")
        except ConfigError:  # cannot be built: routing the request reports it
            return ((root, self._profiles[root]),)
        names = dict.fromkeys([root, *(e.profile for e in entries if e.model is None)])
        return tuple((n, self._profiles[n]) for n in names)

    def _pin(self, profile: str) -> str | None:
        """The model ``profile`` serves whatever is asked (the default profile's ``default_model`` first)."""
        if profile == self._default and self.config.default_model:
            return self.config.default_model
        known = self._profiles.get(profile)
        return known.model if known is not None else None

    def _unpinned(self, profile: str) -> bool:
        return not self._pin(profile)

    # --- callers -------------------------------------------------------------------------------

    def caller(self, name: str, entry: GatewayKey | None = None) -> Caller:
        """The caller for a key: the default access (``entry`` None), or what ``[gateway.keys.<name>]`` allows.

        Raises:
            ConfigError: A listed model or the bound sender names nothing configured.
        """
        path = f"gateway.keys.{name}"
        patterns: Sequence[tuple[str, PublicName]]
        if entry is None or entry.models is None:
            names = self.default_names
            open_profiles = frozenset(p for p in self._profiles if self._unpinned(p) and p in names)
            default_route = True
            patterns = tuple(self.patterns)
        else:
            names, open_profiles, patterns = self._listed(entry.models, path)
            default_route = self._reaches_default(names)
        sender = entry.sender if entry is not None else None
        if sender is not None and sender not in self.config.senders:
            raise ConfigError(
                f"{sender!r} is not a [senders.<id>] table" + did_you_mean(sender, self.config.senders),
                path=f"{path}.sender",
                code="unknown_sender",
            )
        limit = entry.daily_limit_usd if entry is not None else None
        if entry is not None and not self.config.ledger.enabled:
            for name_, value in (("daily_limit_usd", limit), ("rpm", entry.rpm), ("tpm", entry.tpm)):
                if value is not None:
                    raise ConfigError(
                        f"{name_} is enforced from the ledger; enable [ledger]",
                        path=f"{path}.{name_}",
                        code="ledger_required",
                    )
        items = list(names.values())
        return Caller(
            name=name,
            names=names,
            open_profiles=open_profiles,
            sender=sender,
            daily_limit_usd=limit,
            max_call_usd=entry.max_call_usd if entry is not None else None,
            rpm=entry.rpm if entry is not None else None,
            tpm=entry.tpm if entry is not None else None,
            default_route=default_route,
            models_json=(openai_models(items), anthropic_models(items)),
            patterns=patterns,
        )

    def _listed(
        self, models: Sequence[str], path: str
    ) -> tuple[dict[str, PublicName], frozenset[str], tuple[tuple[str, PublicName], ...]]:
        """What a key's ``models`` (at ``path``) lists: its names, the unpinned profiles among them, its patterns.

        Raises:
            ConfigError: A listed model is neither a pattern nor a name of :attr:`universe`.
        """
        chosen: dict[str, PublicName] = {}
        opened: set[str] = set()
        listed = set(models)
        patterns = tuple((p, n) for p, n in self.patterns if p in listed)
        for i, raw in enumerate(models):
            if any(raw == p for p, _ in patterns):
                continue
            known = self.universe.get(raw)
            if known is not None:
                chosen[raw] = known
                if known.kind == "profile" and self._unpinned(raw):
                    opened.add(raw)
                continue
            raise ConfigError(
                f"{raw!r} is not a hint, alias, profile or model of the default profile"
                + did_you_mean(raw, self.universe),
                path=f"{path}.models[{i}]",
                code="unknown_model",
            )
        return chosen, frozenset(opened), patterns

    def _reaches_default(self, names: Mapping[str, PublicName]) -> bool:
        """Whether ``names`` reach the default target: its profile or models, or for a pool a hint to it."""
        target = self._target
        if target is None:
            return True
        if target in self.config.pools:
            return any(n.provider == target for n in names.values())
        return target in names or self._primary in names

    def check(self, routes: Routes | None = None) -> list[ConfigWarning]:
        """Validate every ``[gateway.keys.<name>]`` entry without resolving any key (``turnout check``).

        Args:
            routes: What routes the keys' names, as the gateway's calls are routed (``turnout check`` builds a
                client that sends nothing). None: only the warnings that need no route.

        Returns:
            A warning for each model without a known price that a key with a spend limit can reach (its calls
            there are refused), and for each profile it may send models of its choice to that has neither a
            ``pricing`` table nor a catalogue (every such call is refused).

        Raises:
            ConfigError: A key's ``models`` or ``sender`` names nothing configured, or a limit has no ledger.
        """
        out: list[ConfigWarning] = []
        for name, entry in self.config.gateway.keys.items():
            caller = self.caller(name, entry)
            if caller.spend_limited:
                if routes is not None:
                    out += self._unpriced_routes(caller, routes)
                out += self._unpriced_open_profiles(caller)
        return out

    def _unpriced_routes(self, caller: Caller, routes: Routes) -> list[ConfigWarning]:
        """An entry without a known price that one of ``caller``'s names (or its default route) routes to."""
        path = f"gateway.keys.{caller.name}"
        choices = [(repr(n.id), n.choice) for n in caller.names.values()]
        if caller.default_route or caller.sender is not None:  # an empty ``model`` (see ``_beyond_names``)
            choices.append(("the default route", RouteChoice(None, None)))
        seen: set[tuple[str, str]] = set()
        out: list[ConfigWarning] = []
        for shown, choice in choices:
            try:
                target = routes.route(model=choice.model, provider=choice.provider, sender=caller.sender)
            except ConfigError:  # it routes nowhere: its calls fail the same way, spending nothing
                continue
            for profile, model in unpriced_entries(target):
                if (profile, model) in seen:
                    continue
                seen.add((profile, model))
                out.append(
                    ConfigWarning(
                        code="limited_key_unpriced_model",
                        path=path,
                        message=f"key {caller.name} has a spend limit and {shown} reaches {profile}/{model}, which "
                        f"has no known price: its calls are refused (400 model_unpriced); set pricing on "
                        f"[providers.models.{profile}]",
                    )
                )
        return out

    def _unpriced_open_profiles(self, caller: Caller) -> list[ConfigWarning]:
        """A profile ``caller`` may send models of its choice to, whose prices neither it nor a catalogue knows."""
        path = f"gateway.keys.{caller.name}"
        out: list[ConfigWarning] = []
        opened = {*caller.open_profiles, *(n.provider for _, n in caller.patterns if n.choice.model is None)}
        for profile in sorted(p for p in opened if p in self._profiles):
            family = profile.partition(".")[0]
            if self._profiles[profile].pricing is None and FAMILY_CATALOGUE_IDS.get(family, family) is None:
                out.append(
                    ConfigWarning(
                        code="limited_key_unpriced_model",
                        path=path,
                        message=f"key {caller.name} has a spend limit and may send models of its choice to {profile}, "
                        f"whose prices no catalogue knows: its calls are refused (400 model_unpriced); set pricing "
                        f"on [providers.models.{profile}]",
                    )
                )
        return out

    def callers(
        self, default_keys: Iterable[ClientKey], named_keys: Mapping[str, ClientKey]
    ) -> list[tuple[bytes, Caller]]:
        """``(digest, caller)`` for every client key: those with the default access, then the named keys.

        A key with the default access is named by its key id, read from its digest: a key and its
        ``api_key_hashes`` entry get the same id. A named key is named by its name.

        Raises:
            ConfigError: A key is configured twice (also once as a key and once as its hash), or a named key's
                access is invalid.
        """
        out: list[tuple[bytes, Caller]] = []
        seen: dict[bytes, str] = {}
        default: Caller | None = None
        for key in default_keys:
            default = default or self.caller(ANONYMOUS)
            out.append((key.digest, replace(default, name=digest_key_id(key.digest))))
            seen.setdefault(key.digest, key.path)
        for name, key in named_keys.items():
            if key.digest in seen:
                raise ConfigError(f"this key is also {seen[key.digest]}", path=key.path, code="duplicate_key")
            seen[key.digest] = f"gateway.keys.{name}"
            out.append((key.digest, self.caller(name, self.config.gateway.keys[name])))
        return out

    # --- admission -----------------------------------------------------------------------------

    def admit(self, caller: Caller, model: str) -> Admitted:
        """Where ``caller``'s request for ``model`` goes, with its sender.

        Raises:
            RequestRejected: 400 for a name that cannot be sent; 404 ``model_not_found`` for a name the key may
                not use; 429 when its daily limit is spent.
        """
        if len(model) > MAX_MODEL_CHARS:
            raise invalid(f"model is longer than {MAX_MODEL_CHARS} characters", param="model")
        admitted = caller.admitted.get(model)
        if admitted is None:
            choice = self._beyond_names(caller, model)
            admitted = Admitted(choice.model, choice.provider, caller.sender)
        if caller.daily_limit_usd is not None and self.spend is not None:
            if self.fail_closed and not self.spend.recording:
                self.rejections[(caller.name, "ledger_unavailable")] += 1
                raise RequestRejected(LEDGER_UNAVAILABLE)
            spent = self.spend.spent(caller.name)
            if spent >= caller.daily_limit_usd:
                self.rejections[(caller.name, "daily_limit")] += 1
                raise RequestRejected(daily_limit(caller, spent))
        return admitted

    async def reserve(self, caller: Caller, worst: WorstCase, call_id: str, *, choices: int = 1) -> Hold | None:
        """Reserve ``worst``, the worst case of ``caller``'s call, before it is sent (None: nothing to reserve).

        A limited key's call holds its worst case until it ends and the ledger has its record
        (:class:`~turnout.gateway.spend.SpendBook`), so however many calls run at once the limit is exceeded by
        at most one call's reservation. ``choices``: how many answers the call asks for (priced in ``worst``; the
        refusal names ``n``). A key with a spend limit whose call's route has an entry without a known price is
        refused first: what the call would cost there could not be counted.

        Raises:
            RequestRejected: 400 ``model_unpriced`` for a key with a spend limit when an entry of the route has
                no known price; 400 ``max_call_exceeded`` when the worst case is above the key's ``max_call_usd``;
                429 ``daily_limit_exceeded`` (until 00:00 UTC) when what the key spent and holds reached its limit.
        """
        if caller.spend_limited and worst.unpriced:
            self.rejections[(caller.name, "unpriced")] += 1
            raise RequestRejected(unpriced_model(caller, worst.unpriced))
        amount = worst.amount
        if caller.max_call_usd is not None and amount > caller.max_call_usd:
            self.rejections[(caller.name, "max_call")] += 1
            raise RequestRejected(max_call(caller, amount, choices))
        book = self.spend
        if book is None or (caller.daily_limit_usd is None and caller.rpm is None and caller.tpm is None):
            return None
        limit = caller.daily_limit_usd if caller.daily_limit_usd is not None else math.inf
        rpm, tpm = caller.rpm, caller.tpm
        try:
            hold = await book.reserve(caller.name, amount, limit, call_id, rpm=rpm, tpm=tpm)
        except SharedUnavailable as exc:
            if self.fail_closed:
                busy = isinstance(exc, SharedBusy)  # Redis answers; this process has no connection free in time
                self.rejections[(caller.name, "spend_busy" if busy else "ledger_unavailable")] += 1
                raise RequestRejected(SPEND_BUSY if busy else LEDGER_UNAVAILABLE) from None
            hold = await book.reserve(caller.name, amount, limit, call_id, rpm=rpm, tpm=tpm, shared=False)
        if hold is None:
            self.rejections[(caller.name, "reservation")] += 1
            raise RequestRejected(daily_limit(caller, book.spent(caller.name), book.reserved(caller.name)))
        if isinstance(hold, str):
            self.rejections[(caller.name, hold)] += 1
            raise RequestRejected(per_minute(caller, hold))
        return hold

    def _beyond_names(self, caller: Caller, model: str) -> RouteChoice:
        """The empty model, a model of an unpinned profile, or anything under ``allow_any_model``."""
        default = self._default
        if not model:  # the default route: for a key that may use the default target, or is bound to a sender
            if caller.sender is not None or caller.default_route:
                return RouteChoice(None, None)
            raise not_available(model)
        for pattern, name in caller.patterns:
            if fnmatchcase(model, pattern):
                if name.choice.model is None and name.provider in self._profiles and self._unpinned(name.provider):
                    self._sendable(name.provider, model)  # a profile without a model: the client's name is sent
                    return RouteChoice(model, name.provider)
                return name.choice
        if self.allow_any_model:
            choice = route_choice(self.config, model)
            if choice.model is not None:
                self._sendable(choice.provider or default, choice.model)
            return choice
        head, slash, rest = model.partition("/")
        if slash and rest and head in caller.open_profiles:
            self._sendable(head, rest)
            return RouteChoice(rest, head)
        if default is not None and default in caller.open_profiles and resolve_profile_ref(self.config, head) is None:
            self._sendable(default, model)
            return RouteChoice(model, default)
        raise not_available(model)

    def _sendable(self, root: str | None, model: str) -> None:
        """A client-chosen model must fit every profile that would receive it (see ``model_problem``)."""
        for name, profile in self._receivers.get(root or "", ()):
            problem = model_problem(name, profile, model)
            if problem is not None:
                raise invalid(f"the model cannot be sent to {name}: {problem}", param="model", code="invalid_model")

    def served_models(self) -> frozenset[tuple[str, str]]:
        """Every (profile, model) the configuration itself names: the metric labels worth keeping apart."""
        out: set[tuple[str, str]] = set()
        for name, profile in self._profiles.items():
            out.update((name, m) for m in (profile.model, *profile.fallback_models) if m)
        for n in self.universe.values():
            if n.model:
                out.add((n.provider, n.model))
        return frozenset(out)


def not_available(model: str) -> RequestRejected:
    """The 404 for a model the caller's key may not use (the name shown escaped and cut)."""
    shown = repr(model[:64]) + ("…" if len(model) > 64 else "")
    return RequestRejected(
        Failure(
            status=404,
            kind="not_found",
            message=f"model {shown} is not available with this key; GET /v1/models lists what is",
            param="model",
            code="model_not_found",
        )
    )


#: The 503 for a limited key while the ledger cannot record what it spends (``on_ledger_failure = "closed"``).
LEDGER_UNAVAILABLE = Failure(
    status=503,
    kind="unavailable",
    message=(
        "this key has a spend limit and the gateway's ledger cannot record spend right now; "
        "the call is refused rather than left uncounted (try again later)"
    ),
    code="ledger_unavailable",
    retry_after=5,
)


#: The 503 for a limited key while every Redis connection of this process is busy (it waits a moment first).
SPEND_BUSY = Failure(
    status=503,
    kind="unavailable",
    message=(
        "this key has a spend limit and the gateway is too busy to check it in Redis right now; "
        "the call is refused rather than left uncounted (try again shortly)"
    ),
    code="spend_limits_busy",
    retry_after=1,
)


def daily_limit(caller: Caller, spent: float, held: float = 0.0) -> Failure:
    """The 429 for a key whose daily limit is spent, or held by its calls in flight (it resets at 00:00 UTC)."""
    limit = caller.daily_limit_usd or 0.0
    holding = f", {usd(held)} held by calls in flight" if held else ""
    return Failure(
        status=429,
        kind="rate_limited",
        message=(
            f"the daily spend limit of {usd(limit)} for key {caller.name!r} is reached ({usd(spent)} spent today"
            f"{holding}); it resets at 00:00 UTC"
        ),
        code="daily_limit_exceeded",
        retry_after=max(1, math.ceil(seconds_to_midnight())),
    )


def max_call(caller: Caller, amount: float, choices: int = 1) -> Failure:
    """The 400 for a call whose worst case is above its key's ``max_call_usd`` (lower ``max_tokens``, or ``n``).

    ``choices``: how many answers the call asked for (OpenAI Chat's ``n``), each priced in ``amount``.
    """
    bound = caller.max_call_usd or 0.0
    if choices > 1:
        what = f"its input and max_tokens for each of its n = {choices} choices at the route's prices"
        # the parameter to lower: n, when one choice alone would be within the bound
        param, advice = ("n", "lower n") if amount / choices <= bound else ("max_tokens", "lower max_tokens and n")
    else:
        what, param, advice = "its input and max_tokens at the route's prices", "max_tokens", "lower max_tokens"
    return Failure(
        status=400,
        kind="invalid_request",
        message=(
            f"this call may cost up to {usd(amount)} ({what}), above the {usd(bound)} one call of key "
            f"{caller.name!r} may cost; {advice}"
        ),
        param=param,
        code="max_call_exceeded",
    )


def unpriced_model(caller: Caller, unpriced: Sequence[tuple[str, str]]) -> Failure:
    """The 400 for a call of a key with a spend limit that may reach a model without a known price."""
    profile, model = unpriced[0]
    shown = repr(model[:64]) + ("…" if len(model) > 64 else "")
    more = (
        f" (and {len(unpriced) - 1} more entr{'ies' if len(unpriced) > 2 else 'y'} of its route)"
        if len(unpriced) > 1
        else ""
    )
    return Failure(
        status=400,
        kind="invalid_request",
        message=(
            f"model {shown} has no known price on {profile}{more}, and key {caller.name!r} has a spend limit: what "
            f"the call costs could not be counted, so it is not sent; configure pricing on [providers.models.{profile}]"
            " (USD per million tokens) or use a priced model"
        ),
        param="model",
        code="model_unpriced",
    )


def per_minute(caller: Caller, which: str) -> Failure:
    """The 429 for a key whose requests (``rpm``) or tokens (``tpm``) of this minute are used up."""
    bound = caller.rpm if which == "rpm" else caller.tpm
    what = "requests" if which == "rpm" else "tokens"
    return Failure(
        status=429,
        kind="rate_limited",
        message=f"key {caller.name!r} may use {bound} {what} per minute; this minute's are used up",
        code="rate_limit_exceeded",
        retry_after=max(1, 60 - int(time.time()) % 60),
    )


# --- the ``GET /v1/models`` lists: the public names, in each protocol's shape ---------------------------


def model_object(name: str, provider: str, model: str, *, anthropic: bool) -> dict[str, Any]:
    """The model object for a name chat accepts without it being listed (routed to ``provider`` / ``model``)."""
    if anthropic:
        return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "turnout",
        "turnout": {"kind": "model", "provider": provider, "model": model},
    }


def openai_model(n: PublicName) -> dict[str, Any]:
    """One ``GET /v1/models`` item in OpenAI's shape (it also says what it routes to, under ``turnout``)."""
    return {
        "id": n.id,
        "object": "model",
        "created": 0,
        "owned_by": "turnout",
        "turnout": {"kind": n.kind, "provider": n.provider, "model": n.model},
    }


def anthropic_model(n: PublicName) -> dict[str, Any]:
    """One ``GET /v1/models`` item in Anthropic's shape."""
    return {"type": "model", "id": n.id, "display_name": n.id, "created_at": "1970-01-01T00:00:00Z"}


def openai_models(names: Iterable[PublicName]) -> bytes:
    """``GET /v1/models`` in OpenAI's shape."""
    return orjson.dumps({"object": "list", "data": [openai_model(n) for n in names]})


def anthropic_models(names: Iterable[PublicName]) -> bytes:
    """``GET /v1/models`` in Anthropic's shape (asked for with an ``anthropic-version`` header)."""
    data = [anthropic_model(n) for n in names]
    return orjson.dumps(
        {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )
