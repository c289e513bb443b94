"""Signed-in browsers: the status page's session cookie, signed with a secret of the running server.

A browser cannot send ``Authorization`` when it loads a page, and a key in a URL ends up in histories and logs.
So ``POST /login`` takes a gateway client key from a form, checks it with the gateway's own key check
(:class:`~turnout.gateway.auth.Authenticator`), and sets a cookie that holds not the key but a token:

    <caller name, base64url> "." <expiry, Unix seconds> "." <HMAC-SHA256(secret, name "." expiry), base64url>

The secret is 32 random bytes made when the server starts: a single process makes its own; ``turnout serve
--workers N``'s parent makes one and hands it to each worker over the pipe that starts it (never a file, the
environment or the command line). A restart therefore signs every browser out. The signature is compared in
constant time, then the expiry (:data:`TTL_S`) is checked; a token whose caller's key is no longer configured is
refused by the page (:mod:`turnout.gateway.page`).

The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends it) and
``Secure`` when the request came over TLS. It opens the status page only: the API routes, ``/status`` and
``/metrics`` read the ``Authorization`` and ``x-api-key`` headers alone, so a signed-in browser cannot be made to
spend tokens by another site's form.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from urllib.parse import parse_qs

from aiohttp import web

#: The cookie's name.
COOKIE = "turnout_session"
#: How long a sign-in lasts.
TTL_S = 12 * 3600.0
#: The longest token read (a caller name is a configured key name or a key id).
MAX_TOKEN_CHARS = 512
#: The largest login form read.
MAX_FORM_BYTES = 4096


def new_secret() -> bytes:
    """A fresh signing secret."""
    return secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    """Issues and checks session tokens.

    Args:
        secret: The signing secret (default: a new one; every worker of a server must get the same).
        ttl: How long a token is valid.
        clock: Wall-clock seconds.
    """

    def __init__(
        self, secret: bytes | None = None, *, ttl: float = TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._secret = secret if secret is not None else new_secret()
        self.ttl = ttl
        self.clock = clock

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())

    def issue(self, caller: str) -> str:
        """A token for ``caller`` (a caller's name: a configured key name or a key id), valid for :attr:`ttl`."""
        payload = f"{_b64(caller.encode())}.{int(self.clock() + self.ttl)}"
        return f"{payload}.{self._sign(payload)}"

    def verify(self, token: str | None) -> str | None:
        """The caller a token was issued to, when its signature is right and it has not expired; else None."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        payload, _, mac = token.rpartition(".")
        name, _, expiry = payload.partition(".")
        if not hmac.compare_digest(self._sign(payload).encode(), mac.encode("ascii", "replace")):
            return None
        try:
            if int(expiry) <= self.clock():
                return None
            return _unb64(name).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None

    def set_cookie(self, response: web.StreamResponse, token: str, *, secure: bool) -> None:
        """Put ``token`` in the session cookie of ``response``."""
        response.set_cookie(
            COOKIE, token, max_age=int(self.ttl), path="/", httponly=True, samesite="Strict", secure=secure
        )

    @staticmethod
    def clear_cookie(response: web.StreamResponse, *, secure: bool) -> None:
        """Make the browser forget the session cookie."""
        response.set_cookie(COOKIE, "", max_age=0, path="/", httponly=True, samesite="Strict", secure=secure)


async def read_form(request: web.Request) -> dict[str, str] | None:
    """The fields of a small ``application/x-www-form-urlencoded`` body (the first value of each).

    Returns:
        None when the body is not such a form, or is larger than :data:`MAX_FORM_BYTES`.
    """
    if request.content_type != "application/x-www-form-urlencoded":
        return None
    body = await request.content.read(MAX_FORM_BYTES + 1)
    if len(body) > MAX_FORM_BYTES:
        return None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=8, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items() if values}
