"""Client authentication: ``[gateway] api_keys`` / ``api_keys_env`` and ``[gateway.keys.<name>]``, in constant time.

A client sends its key as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``. The presented key is
hashed once (SHA-256) and compared with :func:`hmac.compare_digest` against the digest of *every*
configured key, so neither the key's length nor which key matched shows in the timing. The match is the
key's :class:`~turnout.gateway.access.Caller`: what it may use, and how logs name it (the key's name, or
for a plain ``api_keys`` entry its key id: the first 8 hex digits of the SHA-256), never the key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping, Sequence

from turnout.config import Config
from turnout.core.errors import ConfigError
from turnout.gateway.access import Caller

log = logging.getLogger("turnout.gateway")


def gateway_keys(config: Config, env: Mapping[str, str] | None = None) -> list[str]:
    """The client keys from ``[gateway] api_keys`` and the comma-separated ``api_keys_env`` variable.

    Fails closed: a configured key that resolves to nothing (an unset ``${ENV}``, an empty variable) is a
    configuration error, never a silently open gateway.

    Raises:
        ConfigError: A configured key is missing or empty.
    """
    env = os.environ if env is None else env
    keys: list[str] = []
    for i, secret in enumerate(config.gateway.api_keys):
        if not secret:
            raise ConfigError(str(secret.unresolved), path=f"gateway.api_keys[{i}]", code="missing_credential")
        keys.append(secret.reveal().strip())
    name = config.gateway.api_keys_env
    if name:
        listed = [k.strip() for k in env.get(name, "").split(",") if k.strip()]
        if not listed:
            why = "is set but empty" if not env.get(name, "").strip() else "holds no key"
            raise ConfigError(
                f"environment variable {name} {why}", path="gateway.api_keys_env", code="missing_credential"
            )
        keys.extend(listed)
    return keys


def named_keys(config: Config) -> dict[str, str]:
    """The key of each ``[gateway.keys.<name>]``, by name.

    Raises:
        ConfigError: A key resolves to nothing (an unset ``${ENV}``, an empty value): fail closed.
    """
    out: dict[str, str] = {}
    for name, entry in config.gateway.keys.items():
        secret = entry.key
        if not secret:
            raise ConfigError(str(secret.unresolved), path=f"gateway.keys.{name}.key", code="missing_credential")
        out[name] = secret.reveal().strip()
    return out


class Authenticator:
    """Checks a request's key against the configured ones.

    Args:
        callers: ``(key, caller)`` for every accepted client key; empty means the gateway is open (a warning
            is logged once) and every request is ``open_caller``'s.
        open_caller: Who an open gateway's requests come from.
    """

    __slots__ = ("_digests", "_open_caller", "open")

    def __init__(self, callers: Sequence[tuple[str, Caller]], open_caller: Caller | None = None) -> None:
        self._digests: list[tuple[bytes, Caller]] = [(hashlib.sha256(k.encode()).digest(), c) for k, c in callers]
        self._open_caller = open_caller
        self.open = not self._digests
        if self.open:
            log.warning(
                "turnout gateway: NO CLIENT API KEY IS CONFIGURED, so anyone who can reach this port can use "
                "your upstream credentials. Set [gateway] api_keys, api_keys_env or [gateway.keys.<name>]."
            )

    def callers(self) -> list[Caller]:
        """Every caller a request can be (the open caller alone for an open gateway)."""
        if self.open:
            return [self._open_caller] if self._open_caller is not None else []
        return [c for _, c in self._digests]

    def digest(self, name: str) -> bytes | None:
        """The SHA-256 digest of the key of the caller named ``name`` (None: no such caller, or an open gateway)."""
        return next((d for d, c in self._digests if c.name == name), None)

    def caller(self, authorization: str | None, x_api_key: str | None) -> Caller | None:
        """The caller whose key is presented (the open caller when the gateway is open), else None."""
        if self.open:
            return self._open_caller
        presented = x_api_key
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() == "bearer":
                presented = token.strip()
        if not presented:
            return None
        digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        found: Caller | None = None
        for known, who in self._digests:  # every key is compared: the timing does not say which matched
            if hmac.compare_digest(digest, known):
                found = who
        return found
