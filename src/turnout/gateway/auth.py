"""Client authentication: ``[gateway] api_keys`` / ``api_keys_env``, checked in constant time.

A client sends its key as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``. The presented key is
hashed once (SHA-256) and compared with :func:`hmac.compare_digest` against the digest of *every*
configured key, so neither the key's length nor which key matched shows in the timing. A caller is named
in logs by its key id (the first 8 hex digits of the SHA-256), never by the key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping

from turnout.config import Config, key_id
from turnout.errors import ConfigError

log = logging.getLogger("turnout.gateway")

#: The caller of an unauthenticated gateway (no key configured).
ANONYMOUS = "anonymous"


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
            why = f"environment variable {secret.source[1:]} is not set" if secret.missing else "the key is empty"
            raise ConfigError(why, path=f"gateway.api_keys[{i}]", code="missing_credential")
        keys.append(secret.reveal().strip())
    name = config.gateway.api_keys_env
    if name:
        listed = [k.strip() for k in env.get(name, "").split(",") if k.strip()]
        if not listed:
            raise ConfigError(
                f"environment variable {name} holds no key", path="gateway.api_keys_env", code="missing_credential"
            )
        keys.extend(listed)
    return keys


class Authenticator:
    """Checks a request's key against the configured ones.

    Args:
        keys: The accepted client keys; empty means the gateway is open (a warning is logged once).
    """

    __slots__ = ("_digests", "open")

    def __init__(self, keys: list[str]) -> None:
        self._digests: list[tuple[bytes, str]] = [(hashlib.sha256(k.encode()).digest(), key_id(k)) for k in keys]
        self.open = not self._digests
        if self.open:
            log.warning(
                "turnout gateway: NO CLIENT API KEY IS CONFIGURED, so anyone who can reach this port can use "
                "your upstream credentials. Set [gateway] api_keys or api_keys_env."
            )

    def caller(self, authorization: str | None, x_api_key: str | None) -> str | None:
        """The caller's key id when the key is valid (:data:`ANONYMOUS` when the gateway is open), else None."""
        if self.open:
            return ANONYMOUS
        presented = x_api_key
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() == "bearer":
                presented = token.strip()
        if not presented:
            return None
        digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        found: str | None = None
        for known, kid in self._digests:  # every key is compared: the timing does not say which matched
            if hmac.compare_digest(digest, known):
                found = kid
        return found
