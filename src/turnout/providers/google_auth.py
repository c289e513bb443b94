"""Google access tokens for Vertex AI profiles: Application Default Credentials, cached, refreshed off the loop.

google-auth owns the credential chain (``credentials_file``, ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
application-default file, the metadata server, workload identity federation) and the token exchange; this
module only decides when to ask it. A token is reused until :data:`REFRESH_MARGIN_S` before it expires;
discovery and refresh run on a credential thread (google-auth's transport blocks;
:mod:`turnout.providers.credential_threads`), never in the event loop's default executor, which the ledger's
reservations use. One refresh runs at a time per profile and the calls that come meanwhile wait for it; each
waits at most :data:`TOKEN_TIMEOUT_S`, so a token endpoint that never answers costs its calls that bound and
holds one thread, and neither a reservation nor the process's shutdown waits for it. google-auth is imported
by this module alone, which only a Vertex profile's adapter imports: never ``import turnout``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

import google.auth
import google.auth.transport
import google.auth.transport.requests
import google.oauth2.credentials
from google.auth import exceptions
from google.oauth2 import service_account

from turnout.core.errors import ErrorClass, ProviderError
from turnout.providers.credential_threads import Flight, finished

#: The OAuth scope Vertex AI accepts.
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
#: A token is refreshed this long before it expires (google-auth itself treats the last 3m45s as stale).
REFRESH_MARGIN_S = 300.0
#: How long a token without a stated expiry is reused.
UNDATED_TOKEN_S = 300.0
#: The bound on one discovery-and-refresh (the metadata server's own probes included).
TOKEN_TIMEOUT_S = 30.0
#: The bound google-auth's transport puts on each of its requests.
REQUEST_TIMEOUT_S = 10.0
#: Where Application Default Credentials look, for an error that says what was missing.
LOOKED_FOR = (
    "the profile's credentials_file",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "gcloud's application-default credentials file",
    "the metadata server (not probed with NO_GCE_CHECK=true)",
)


class _Bounded(google.auth.transport.Request):
    """google-auth's requests transport, with every request bounded by :data:`REQUEST_TIMEOUT_S`."""

    def __init__(self, timeout: float) -> None:
        self._inner = google.auth.transport.requests.Request()
        self._timeout = timeout

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: Any = None,
        headers: Any = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        bound = self._timeout if timeout is None else min(timeout, self._timeout)
        return self._inner(url, method=method, body=body, headers=headers, timeout=bound, **kwargs)


class TokenSource:
    """The access token of one Vertex profile.

    Args:
        profile: The profile (``vertex.alias``), for errors.
        credentials_file: A service-account (or other ADC) JSON file; None: Application Default Credentials.
        clock: Wall-clock seconds (tests inject a fake one).
        timeout: The bound on one discovery-and-refresh.
    """

    def __init__(
        self,
        profile: str,
        credentials_file: str | None = None,
        *,
        clock: Callable[[], float] = time.time,
        timeout: float = TOKEN_TIMEOUT_S,
    ) -> None:
        self.profile = profile
        self.credentials_file = credentials_file
        self._clock = clock
        self._timeout = timeout
        self._credentials: Any = None
        self._request: _Bounded | None = None
        self._token: str | None = None
        self._fresh_until = 0.0
        self._lock = threading.Lock()  # one refresh at a time, whichever event loop or thread asks
        self._flight: Flight[str] = Flight()  # the refresh in flight: the calls that come meanwhile wait for it
        #: Refreshes made (tests and the benchmark read it).
        self.refreshes = 0

    def cached(self) -> str | None:
        """The current token when it is not near its expiry (no I/O)."""
        token = self._token
        return token if token is not None and self._clock() < self._fresh_until else None

    async def token(self) -> str:
        """A valid token: the cached one, else a fresh one (refreshed in a worker thread).

        Raises:
            ProviderError: No credentials were found, or the token exchange failed or timed out.
        """
        token = self.cached()
        if token is not None:
            return token
        return await self._run(None)

    async def renew(self, rejected: str) -> str:
        """A token to retry with after ``rejected`` got a 401 (a new one, unless another call already renewed it)."""
        return await self._run(rejected)

    async def _run(self, rejected: str | None) -> str:
        """The refresh in flight (else a new one) on a credential thread, waited for at most the timeout.

        A renewal that joined a refresh begun before its token was rejected, and got that token back, asks again.
        While a refresh has gone on longer than the timeout (an endpoint that never answers), a call fails at once.
        """
        if self._flight.overdue(self._timeout):  # the refresh under way already outlasted a call's wait
            raise self._error(
                f"no Google access token: the refresh under way has not answered in {self._timeout:g}s",
                ErrorClass.RETRYABLE,
                "token_timeout",
            )
        try:
            async with asyncio.timeout(self._timeout):
                token = await finished(self._flight.join(functools.partial(self._refresh, rejected)))
                if rejected is not None and token == rejected:
                    token = await finished(self._flight.join(functools.partial(self._refresh, rejected)))
                return token
        except TimeoutError:
            raise self._error(
                f"no Google access token after {self._timeout:g}s", ErrorClass.RETRYABLE, "token_timeout"
            ) from None

    def _refresh(self, rejected: str | None) -> str:
        """Discover credentials (once) and refresh the token, unless another thread just did."""
        with self._lock:
            token = self._token
            if token is not None and (token != rejected if rejected is not None else self.cached() is not None):
                return token
            try:
                if self._request is None:
                    self._request = _Bounded(REQUEST_TIMEOUT_S)
                if self._credentials is None:
                    self._credentials = self._discover(self._request)
                self._credentials.refresh(self._request)
            except exceptions.DefaultCredentialsError as exc:
                raise self._error(
                    "no Google credentials found; looked for " + ", ".join(LOOKED_FOR),
                    ErrorClass.NON_RETRYABLE,
                    "credentials_not_found",
                ) from exc
            except exceptions.RefreshError as exc:
                # google-auth marks a refresh worth retrying (a 5xx or a transport failure of the token endpoint)
                retryable = bool(getattr(exc, "retryable", False))
                raise self._error(
                    "the Google token exchange was refused" if not retryable else "the Google token exchange failed",
                    ErrorClass.RETRYABLE if retryable else ErrorClass.NON_RETRYABLE,
                    "token_refresh_failed",
                ) from exc
            except (exceptions.TransportError, OSError, ValueError) as exc:
                raise self._error(
                    f"the Google token exchange failed ({type(exc).__name__})",
                    ErrorClass.RETRYABLE,
                    "token_refresh_failed",
                ) from exc
            return self._take(self._credentials)

    def _discover(self, request: _Bounded) -> Any:
        if self.credentials_file:
            return self._from_file(self.credentials_file)
        credentials, _ = google.auth.default(scopes=SCOPES, request=request)
        return credentials

    def _from_file(self, path: str) -> Any:
        """The credentials of a key file of a type named in it (loaded by that type's own class)."""
        try:
            with open(path, "rb") as f:
                info = json.loads(f.read(1024 * 1024))
            kind = info.get("type") if isinstance(info, dict) else None
            if kind == "service_account":
                return service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
                    info, scopes=SCOPES
                )
            if kind == "authorized_user":
                return google.oauth2.credentials.Credentials.from_authorized_user_info(  # type: ignore[no-untyped-call]
                    info, scopes=SCOPES
                )
        except (OSError, ValueError) as exc:  # unreadable, not JSON, or a key the library cannot load
            raise self._error(
                f"credentials_file could not be loaded ({type(exc).__name__})",
                ErrorClass.NON_RETRYABLE,
                "credentials_not_found",
            ) from exc
        raise self._error(
            "credentials_file must be a service_account or authorized_user file "
            "(for workload identity federation, point GOOGLE_APPLICATION_CREDENTIALS at its configuration)",
            ErrorClass.NON_RETRYABLE,
            "credentials_not_found",
        )

    def _take(self, credentials: Any) -> str:
        token = credentials.token
        if not isinstance(token, str) or not token:
            raise self._error("the Google token exchange gave no token", ErrorClass.RETRYABLE, "token_refresh_failed")
        now = self._clock()
        expiry = credentials.expiry
        if expiry is None:
            fresh = now + UNDATED_TOKEN_S
        else:  # google-auth's expiry is naive UTC; a token that lives less than the margin is reused for half its life
            left = expiry.replace(tzinfo=UTC).timestamp() - now
            fresh = now + (left - REFRESH_MARGIN_S if left > 2 * REFRESH_MARGIN_S else max(left, 0.0) / 2)
        self._token, self._fresh_until = token, fresh
        self.refreshes += 1
        return token

    def _error(self, message: str, error_class: ErrorClass, error_type: str) -> ProviderError:
        return ProviderError(message, error_class=error_class, provider=self.profile, error_type=error_type)
