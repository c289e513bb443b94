"""Signed-in browsers: the status page's session cookie, signed with a secret of the running server.

A browser cannot send ``Authorization`` when it loads a page, and a key in a URL ends up in histories and logs.
So ``POST /login`` takes a gateway client key from a form, checks it with the gateway's own key check
(:class:`~turnout.gateway.auth.Authenticator`), and sets a cookie that holds not the key but a token:

    <caller name, base64url> "." <expiry, Unix seconds> "." <session id> "." <key generation> "." <HMAC-SHA256>

(the HMAC, base64url, is of everything before it). The session id is 16 random bytes; the key generation is a
short HMAC of the caller's key under the same secret (never the key), so a token ends when its key is rotated or
removed from the configuration, also on a worker started again with the new configuration.

The secret is 32 random bytes made when the server starts: a single process makes its own; ``turnout serve
--workers N``'s parent makes one and hands it to each worker over the pipe that starts it (never a file, the
environment or the command line). A restart therefore signs every browser out. The signature is compared in
constant time, then the expiry (:data:`TTL_S`) is checked; a token whose caller's key is no longer configured, or
whose key generation is not the key's now, is refused by the page (:mod:`turnout.gateway.page`).

``POST /logout`` revokes the session on the server (:class:`Revocations`): its id is kept until the token would have
expired and refused from then on, by every worker: with ``--workers N`` the revocation is a file in the server's
private directory that all workers share (:mod:`turnout.gateway.workers`), so it holds whichever worker answers. The
secret is the server's alone, so a cookie never opens another server (another host behind the same Redis) anyway.

Sign-in attempts are rate limited (:class:`LoginThrottle`): after :data:`FREE_FAILURES` wrong keys from one client
address, or for one presented key, each further attempt from it must wait twice as long as the last (1 s, 2 s, 4 s,
… up to :data:`MAX_DELAY_S`); an attempt during the wait is answered 429 with ``Retry-After`` and the key is not
checked. A success clears its address and key. Each worker counts on its own (the kernel spreads connections, so N
workers allow up to N times the rate).

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
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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
#: Wrong keys allowed from one address (or for one key) before each further attempt must wait.
FREE_FAILURES = 5
#: The longest wait the login rate limit imposes.
MAX_DELAY_S = 300.0
#: A failure streak is forgotten this long after its last failure.
FORGET_AFTER_S = 900.0
#: Addresses and keys the rate limit remembers (the oldest are forgotten first).
MAX_TRACKED = 10_000
_REVOKED_PREFIX = "session-"


def new_secret() -> bytes:
    """A fresh signing secret."""
    return secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True, kw_only=True)
class PageSession:
    """What a valid token says.

    Attributes:
        caller: The caller's name.
        id: The session's id (what logout revokes).
        generation: The key generation it was issued for.
        expiry: When it expires (Unix seconds).
    """

    caller: str
    id: str
    generation: str
    expiry: int


class Revocations:
    """Sessions ended by logout, until they would have expired anyway.

    Args:
        directory: The server's directory that every worker shares (one file per revoked session); None: this process
            alone (a set in memory).
        clock: Wall-clock seconds.
    """

    def __init__(self, directory: str | Path | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.clock = clock
        self._memory: dict[str, float] = {}

    def revoke(self, session: PageSession) -> None:
        """End ``session`` for every worker (a failure to record it is an error: the logout must hold)."""
        self._memory[session.id] = session.expiry
        self._forget_expired()
        if self.directory is not None:
            path = self.directory / f"{_REVOKED_PREFIX}{session.id}"
            path.write_text(str(session.expiry))

    def revoked(self, session: PageSession) -> bool:
        """Whether ``session`` was ended by a logout (of any worker)."""
        if session.id in self._memory:
            return True
        return self.directory is not None and (self.directory / f"{_REVOKED_PREFIX}{session.id}").exists()

    def _forget_expired(self) -> None:
        now = self.clock()
        for sid in [sid for sid, expiry in self._memory.items() if expiry <= now]:
            del self._memory[sid]


class PageSessions:
    """Issues and checks session tokens.

    Args:
        secret: The signing secret (default: a new one; every worker of a server must get the same).
        ttl: How long a token is valid.
        clock: Wall-clock seconds.
        revocations: Where logouts are recorded (default: this process's memory).
    """

    def __init__(
        self,
        secret: bytes | None = None,
        *,
        ttl: float = TTL_S,
        clock: Callable[[], float] = time.time,
        revocations: Revocations | None = None,
    ) -> None:
        self._secret = secret if secret is not None else new_secret()
        self.ttl = ttl
        self.clock = clock
        self.revocations = revocations if revocations is not None else Revocations()

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())

    def generation(self, key_digest: bytes | None) -> str:
        """The key generation of a key (by its SHA-256 digest): a short HMAC, never the key or its plain digest."""
        if not key_digest:
            return "-"
        return _b64(hmac.new(self._secret, b"generation:" + key_digest, hashlib.sha256).digest()[:9])

    def issue(self, caller: str, key_digest: bytes | None = None) -> str:
        """A token for ``caller`` (a configured key name or a key id) and its key, valid for :attr:`ttl`."""
        sid = _b64(secrets.token_bytes(16))
        payload = f"{_b64(caller.encode())}.{int(self.clock() + self.ttl)}.{sid}.{self.generation(key_digest)}"
        return f"{payload}.{self._sign(payload)}"

    def session(self, token: str | None) -> PageSession | None:
        """What a token says, when its signature is right, it has not expired and it was not revoked; else None."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        payload, _, mac = token.rpartition(".")
        if not hmac.compare_digest(self._sign(payload).encode(), mac.encode("ascii", "replace")):
            return None
        parts = payload.split(".")
        if len(parts) != 4:
            return None
        name, expiry, sid, generation = parts
        try:
            found = PageSession(caller=_unb64(name).decode(), id=sid, generation=generation, expiry=int(expiry))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        if found.expiry <= self.clock() or self.revocations.revoked(found):
            return None
        return found

    def verify(self, token: str | None) -> str | None:
        """The caller of a valid token (see :meth:`session`), else None."""
        found = self.session(token)
        return found.caller if found is not None else None

    def set_cookie(self, response: web.StreamResponse, token: str, *, secure: bool) -> None:
        """Put ``token`` in the session cookie of ``response``."""
        response.set_cookie(
            COOKIE, token, max_age=int(self.ttl), path="/", httponly=True, samesite="Strict", secure=secure
        )

    @staticmethod
    def clear_cookie(response: web.StreamResponse, *, secure: bool) -> None:
        """Make the browser forget the session cookie."""
        response.set_cookie(COOKIE, "", max_age=0, path="/", httponly=True, samesite="Strict", secure=secure)


class LoginThrottle:
    """The sign-in rate limit: a growing wait after repeated wrong keys, per client address and per presented key.

    Args:
        free: Failures allowed before the first wait.
        max_delay: The longest wait, in seconds.
        clock: Monotonic seconds.
    """

    def __init__(
        self, free: int = FREE_FAILURES, max_delay: float = MAX_DELAY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.free = free
        self.max_delay = max_delay
        self.clock = clock
        #: Per address or key digest: (failures, when the last one was, until when attempts wait).
        self._streaks: OrderedDict[str, tuple[int, float, float]] = OrderedDict()

    @staticmethod
    def _subjects(address: str, key: str) -> tuple[str, str]:
        digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        return f"address:{address[:64]}", f"key:{digest}"

    def wait(self, address: str, key: str) -> float:
        """Seconds this attempt must still wait (0: it may be checked now)."""
        now = self.clock()
        longest = 0.0
        for subject in self._subjects(address, key):
            streak = self._streaks.get(subject)
            if streak is not None:
                longest = max(longest, streak[2] - now)
        return longest

    def failed(self, address: str, key: str) -> None:
        """Count a wrong key from ``address``."""
        now = self.clock()
        for subject in self._subjects(address, key):
            failures, last, _ = self._streaks.pop(subject, (0, now, now))
            if now - last > FORGET_AFTER_S:
                failures = 0
            failures += 1
            over = failures - self.free
            until = now + min(self.max_delay, 2.0 ** (over - 1)) if over > 0 else now
            self._streaks[subject] = (failures, now, until)
        while len(self._streaks) > MAX_TRACKED:
            self._streaks.popitem(last=False)

    def succeeded(self, address: str, key: str) -> None:
        """A right key: its address and key start afresh."""
        for subject in self._subjects(address, key):
            self._streaks.pop(subject, None)


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
