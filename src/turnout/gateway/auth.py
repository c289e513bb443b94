"""Client authentication: ``[gateway] api_keys`` / ``api_keys_env`` / ``api_key_hashes`` and ``[gateway.keys.<name>]``.

A client sends its key as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``. The gateway keeps no key:
at start-up each configured key is hashed once (SHA-256, :func:`key_digest`) into one table of digests, and a
key configured as its SHA-256 (``api_key_hashes``, ``key_sha256``) goes into the same table as it is. The
presented key is hashed once and compared with :func:`hmac.compare_digest` against *every* digest of the
table, so neither the key's length nor which key matched shows in the timing. The match is the key's
:class:`~turnout.gateway.access.Caller`: what it may use, and how logs name it (the key's name, or for a key
with the default access its key id: the first 8 hex digits of the SHA-256, the same for a key and for its
hash), never the key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping, Sequence

from turnout.config import Config
from turnout.core.errors import ConfigError
from turnout.gateway.access import Caller, ClientKey

log = logging.getLogger("turnout.gateway")


def key_digest(key: str) -> bytes:
    """The SHA-256 digest of a client key: what the gateway keeps and compares, and what ``key_sha256`` holds."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def gateway_keys(config: Config, env: Mapping[str, str] | None = None) -> list[str]:
    """The plain client keys from ``[gateway] api_keys`` and the comma-separated ``api_keys_env`` variable.

    Fails closed: a configured key that resolves to nothing (an unset ``${ENV}``, an empty variable) is a
    configuration error, never a silently open gateway.

    Raises:
        ConfigError: A configured key is missing or empty.
    """
    return [key for _, key in _plain_keys(config, os.environ if env is None else env)]


def _plain_keys(config: Config, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(path, key)`` of each key of ``api_keys`` and ``api_keys_env`` (see :func:`gateway_keys`)."""
    keys: list[tuple[str, str]] = []
    for i, secret in enumerate(config.gateway.api_keys):
        path = f"gateway.api_keys[{i}]"
        if not secret:
            raise ConfigError(str(secret.unresolved), path=path, code="missing_credential")
        keys.append((path, secret.reveal().strip()))
    name = config.gateway.api_keys_env
    if name:
        listed = [k.strip() for k in env.get(name, "").split(",") if k.strip()]
        if not listed:
            why = "is set but empty" if not env.get(name, "").strip() else "holds no key"
            raise ConfigError(
                f"environment variable {name} {why}", path="gateway.api_keys_env", code="missing_credential"
            )
        keys.extend(("gateway.api_keys_env", k) for k in listed)
    return keys


def default_keys(
    config: Config, env: Mapping[str, str] | None = None, plain: Sequence[str] | None = None
) -> list[ClientKey]:
    """Every client key with the default access, as digests: ``api_keys``, ``api_keys_env``, ``api_key_hashes``.

    Args:
        config: The configuration.
        env: The environment ``api_keys_env`` is read from (default: the process's).
        plain: Plain keys to use instead of ``api_keys`` and ``api_keys_env`` (``api_key_hashes`` are added).

    Raises:
        ConfigError: A configured key is missing or empty (see :func:`gateway_keys`).
    """
    if plain is None:
        keys = _plain_keys(config, os.environ if env is None else env)
    else:
        keys = [(f"keys[{i}]", k) for i, k in enumerate(plain)]
    out = [ClientKey(path, key_digest(key)) for path, key in keys]
    for i, hexdigest in enumerate(config.gateway.api_key_hashes):
        out.append(ClientKey(f"gateway.api_key_hashes[{i}]", bytes.fromhex(hexdigest)))
    return out


def named_keys(config: Config) -> dict[str, ClientKey]:
    """The key of each ``[gateway.keys.<name>]``, by name, as a digest (``key`` hashed here, or ``key_sha256``).

    Raises:
        ConfigError: A key resolves to nothing (an unset ``${ENV}``, an empty value): fail closed.
    """
    out: dict[str, ClientKey] = {}
    for name, entry in config.gateway.keys.items():
        path = f"gateway.keys.{name}"
        if entry.key_sha256 is not None:
            out[name] = ClientKey(f"{path}.key_sha256", bytes.fromhex(entry.key_sha256))
            continue
        secret = entry.key
        if secret is None or not secret:
            why = secret.unresolved if secret is not None else "no key"
            raise ConfigError(str(why), path=f"{path}.key", code="missing_credential")
        out[name] = ClientKey(f"{path}.key", key_digest(secret.reveal().strip()))
    return out


class Authenticator:
    """Checks a request's key against the configured ones.

    Args:
        callers: ``(digest, caller)`` for every accepted client key (its SHA-256 digest, :func:`key_digest`);
            empty means the gateway is open (a warning is logged once) and every request is ``open_caller``'s.
        open_caller: Who an open gateway's requests come from.
    """

    __slots__ = ("_digests", "_open_caller", "open")

    def __init__(self, callers: Sequence[tuple[bytes, Caller]], open_caller: Caller | None = None) -> None:
        self._digests: list[tuple[bytes, Caller]] = list(callers)
        self._open_caller = open_caller
        self.open = not self._digests
        if self.open:
            log.warning(
                "turnout gateway: NO CLIENT API KEY IS CONFIGURED, so anyone who can reach this port can use "
                "your upstream credentials. Set [gateway] api_keys, api_keys_env, api_key_hashes or "
                "[gateway.keys.<name>]."
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
        digest = key_digest(presented)
        found: Caller | None = None
        for known, who in self._digests:  # every key is compared: the timing does not say which matched
            if hmac.compare_digest(digest, known):
                found = who
        return found
