"""The simulator's Google OAuth token endpoint and the bearer tokens Vertex AI routes accept.

A service-account file whose ``token_uri`` is ``{sim}/_sim/google/token`` makes google-auth exchange its signed
JWT here, as it would at ``oauth2.googleapis.com``: the assertion must be a three-part JWT naming an issuer
(its signature is not checked: the simulator holds no public keys), and the answer is a token valid for
:attr:`GoogleTokens.lifetime` seconds of the simulator's clock. Vertex routes accept only a token issued here
and not expired; ``POST /_sim/google/expire`` expires every token issued so far, so a test can make the next
call's token stale and watch the client renew it.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable

import orjson

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
DEFAULT_LIFETIME_S = 3600
_MAX_TOKENS = 4096


class GoogleTokens:
    """Issued access tokens and when each expires."""

    def __init__(self, clock: Callable[[], float], lifetime: int = DEFAULT_LIFETIME_S) -> None:
        self._clock = clock
        self.lifetime = lifetime
        self._expiry: dict[str, float] = {}
        #: Tokens issued since start (tests read it).
        self.issued = 0

    def grant(self, grant_type: str | None, assertion: str | None) -> tuple[int, dict[str, object]]:
        """The token endpoint's answer (status, JSON body) for a form's ``grant_type`` and ``assertion``."""
        if grant_type != JWT_BEARER:
            return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type."}
        if not _issuer(assertion):
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT: not a signed assertion."}
        if len(self._expiry) >= _MAX_TOKENS:
            self._expiry.clear()
        token = "ya29.sim-" + secrets.token_urlsafe(24)
        self._expiry[token] = self._clock() + self.lifetime
        self.issued += 1
        return 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def valid(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries a token issued here that has not expired."""
        if not authorization or authorization[:7].lower() != "bearer ":
            return False
        expiry = self._expiry.get(authorization[7:].strip())
        return expiry is not None and self._clock() < expiry

    def expire(self) -> int:
        """Expire every token issued so far; returns how many there were."""
        count = len(self._expiry)
        self._expiry = dict.fromkeys(self._expiry, float("-inf"))
        return count


def _issuer(assertion: str | None) -> bool:
    """Whether ``assertion`` is a JWT (header.claims.signature) whose claims name an issuer."""
    parts = assertion.split(".") if assertion else []
    if len(parts) != 3 or not all(parts):
        return False
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return False
    return isinstance(claims, dict) and isinstance(claims.get("iss"), str) and bool(claims["iss"])


def service_account_info(token_uri: str, *, project: str = "sim-project") -> dict[str, str]:
    """A Google service-account key (a new 2048-bit RSA key) whose ``token_uri`` is ``token_uri``.

    google-auth signs its JWT with the key and exchanges it at ``token_uri``, as with a real key file; pointed at
    :attr:`Simulator.google_token_uri` everything stays on loopback. Needs ``cryptography`` (a dependency of
    google-auth, the ``gcp`` extra).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {
        "type": "service_account",
        "project_id": project,
        "private_key_id": "sim-key-0001",
        "private_key": pem.decode(),
        "client_email": f"turnout-sim@{project}.iam.gserviceaccount.com",
        "client_id": "100000000000000000001",
        "token_uri": token_uri,
    }
