"""What Turnout takes from botocore for AWS: the credential chain and event-stream frames.

Imported only by the Bedrock adapter, so ``import turnout`` never imports botocore (the ``aws`` extra).

- :class:`AwsCredentials` resolves a profile's credentials through botocore's own chain (environment, shared
  config and credentials files and ``aws_profile``, SSO, assume-role, web identity, container and instance
  metadata) on a credential thread (:mod:`turnout.providers.credential_threads`), never on the event loop nor in
  its default executor (which the ledger's reservations use), and keeps them: a call uses the kept ones, and
  credentials that can expire are handed to botocore's own refresh at most every :data:`RECHECK_S` seconds,
  again on a credential thread; a chain that found nothing is asked again only after as long. One resolution
  runs at a time per profile, the calls that come meanwhile wait for it, each at most :data:`RESOLVE_TIMEOUT_S`
  (a ``credential_process`` or an endpoint that hangs fails its calls in that time, and then at once while it
  still hangs, and holds one thread).
- Requests are signed with these credentials by :mod:`turnout.providers.sigv4` (SigV4 computed with the
  standard library, held to botocore's ``SigV4Auth`` by a differential test and to AWS's test suite).
- :class:`FrameReader` cuts an ``application/vnd.amazon.eventstream`` body into frames and hands each whole
  frame to botocore's ``EventStreamBuffer``, which checks its prelude and message CRCs; the frame's lengths are
  bounded here first, so a zero-length or lying prelude is a protocol error at once, never a wait or a spin.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from botocore import eventstream
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.exceptions import BotoCoreError, NoCredentialsError, PartialCredentialsError, ProfileNotFound
from botocore.session import Session

from turnout.core.errors import ErrorClass, ProtocolError, ProviderError
from turnout.providers.credential_threads import Flight, finished

#: The signing name of the Bedrock runtime (botocore's ``bedrock-runtime`` model: ``signingName``).
SIGNING_NAME = "bedrock"
#: How often kept credentials that can expire are handed to botocore to refresh (it refreshes only when due).
RECHECK_S = 30.0
#: The longest a call waits for the chain (botocore bounds each of its own requests; a ``credential_process`` it
#: does not).
RESOLVE_TIMEOUT_S = 30.0
#: The prelude: total length, headers length, prelude CRC (big-endian 32-bit each).
PRELUDE = 12
#: The prelude, the message CRC and nothing else: the smallest frame.
MIN_FRAME = 16
#: botocore's own bounds on one frame's headers and payload.
MAX_HEADERS = 128 * 1024
MAX_FRAME = 24 * 1024 * 1024 + MAX_HEADERS + MIN_FRAME

_prelude = struct.Struct(">II")


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded event-stream frame: its headers (by name, as botocore types their values) and its payload bytes."""

    headers: Mapping[str, object]
    payload: bytes


class FrameReader:
    """Event-stream frames from body bytes as they arrive (CRCs checked by botocore).

    Args:
        provider / model: Who is read, for the errors.
        max_frame: The largest frame accepted (bytes).
    """

    def __init__(self, provider: str, model: str | None, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._provider = provider
        self._model = model
        self._max = min(max_frame, MAX_FRAME)

    @property
    def pending(self) -> int:
        """Bytes of a frame not yet complete."""
        return len(self._buf)

    def _bad(self, what: str) -> ProtocolError:
        return ProtocolError(f"malformed event stream: {what}", provider=self._provider, model=self._model)

    def feed(self, chunk: bytes, out: list[Frame]) -> None:
        """Append the frames ``chunk`` completed to ``out``.

        Raises:
            ProtocolError: A frame's lengths are impossible or too large, or a CRC does not match (the frames
                before it are in ``out``).
        """
        buf = self._buf
        buf += chunk
        start = 0
        size = len(buf)
        try:
            while size - start >= PRELUDE:
                total, headers = _prelude.unpack_from(buf, start)
                if total < MIN_FRAME or headers > total - MIN_FRAME or headers > MAX_HEADERS:
                    raise self._bad(f"a frame of {total} bytes with {headers} bytes of headers")
                if total > self._max:
                    raise self._bad(f"a frame of {total} bytes exceeds the limit of {self._max} bytes")
                if size - start < total:
                    break
                out.append(self._decode(bytes(buf[start : start + total])))
                start += total
        finally:
            if start:
                del buf[:start]

    def _decode(self, raw: bytes) -> Frame:
        """Botocore's decoding of one whole frame: every header type, and the error for a frame that is wrong."""
        parser = eventstream.EventStreamBuffer()
        parser.add_data(raw)
        try:
            message = next(parser)
        except (eventstream.ParserError, StopIteration, struct.error, ValueError, UnicodeDecodeError) as exc:
            raise self._bad(type(exc).__name__) from exc
        return Frame(message.headers, message.payload)


class AwsCredentials:
    """One profile's AWS credentials from botocore's chain, resolved off the event loop and kept.

    Args:
        profile: The Turnout profile (``bedrock.main``), for the errors.
        aws_profile: The shared-config profile to read (None: botocore's default, ``AWS_PROFILE``).
        clock: Monotonic seconds (tests inject a fake one).
        timeout: The longest a call waits for a resolution (:data:`RESOLVE_TIMEOUT_S`).
    """

    def __init__(
        self,
        profile: str,
        aws_profile: str | None,
        clock: Callable[[], float] = time.monotonic,
        *,
        timeout: float = RESOLVE_TIMEOUT_S,
    ) -> None:
        self.profile = profile
        self.aws_profile = aws_profile
        self._clock = clock
        self._timeout = timeout
        self._frozen: ReadOnlyCredentials | None = None
        self._source: Credentials | None = None  # kept when botocore may refresh them
        self._check_at = 0.0
        self._flight: Flight[ReadOnlyCredentials] = Flight()  # the resolution in flight, shared by its callers
        self._session: Session | None = None
        self._missing: ProviderError | None = None  # the chain's last answer when it found nothing

    async def get(self) -> ReadOnlyCredentials:
        """The credentials to sign with (resolved or refreshed on a credential thread when needed).

        Raises:
            ProviderError: No credentials anywhere (non-retryable, naming the profile and where it looked), the
                chain failed (retryable when it may succeed later), or it did not answer within the timeout
                (retryable, ``credentials_timeout``).
        """
        frozen = self._frozen
        if frozen is not None and (self._source is None or self._clock() < self._check_at):
            return frozen
        missing = self._missing
        if missing is not None and self._clock() < self._check_at:
            raise missing  # the chain found nothing a moment ago: no thread, no metadata wait per call
        if self._flight.overdue(self._timeout):  # the resolution under way already outlasted a call's wait
            raise self._timed_out("the resolution under way has not answered in")
        job = self._flight.join(self._resolve)  # one resolution at a time: the calls waiting share its result
        try:
            async with asyncio.timeout(self._timeout):
                frozen = await finished(job)
        except TimeoutError:
            raise self._timed_out("not resolved within") from None
        except ProviderError as exc:
            if exc.error_type == "credentials_missing" and self._flight.current is job:
                self._missing, self._check_at = exc, self._clock() + RECHECK_S
            raise
        if self._flight.current is job:  # else the credentials were invalidated meanwhile: not kept
            self._frozen, self._missing = frozen, None
            self._check_at = self._clock() + RECHECK_S
        return frozen

    def _timed_out(self, what: str) -> ProviderError:
        return ProviderError(
            f"AWS credentials for {self.profile}: {what} {self._timeout:g}s",
            error_class=ErrorClass.RETRYABLE,
            provider=self.profile,
            error_type="credentials_timeout",
        )

    def invalidate(self) -> None:
        """Forget the kept credentials (the upstream said they expired): the next call resolves them anew."""
        self._frozen = None
        self._source = None
        self._session = None
        self._missing = None
        self._flight.forget()  # a resolution still running may return the expired ones

    def _resolve(self) -> ReadOnlyCredentials:
        """Resolve through botocore's chain (on a credential thread: it reads files, runs processes, asks endpoints)."""
        try:
            source = self._source
            if source is None:
                if self._session is None:
                    self._session = Session(profile=self.aws_profile)
                source = self._session.get_credentials()
                if source is None:
                    raise self.missing()
            frozen = source.get_frozen_credentials()
        except ProviderError:
            raise
        except (NoCredentialsError, PartialCredentialsError, ProfileNotFound) as exc:
            raise self.missing(exc) from exc
        except BotoCoreError as exc:
            raise ProviderError(
                f"AWS credentials for {self.profile} could not be resolved: {type(exc).__name__}: {str(exc)[:300]}",
                error_class=ErrorClass.RETRYABLE,
                provider=self.profile,
                error_type="credentials_unavailable",
            ) from exc
        if not frozen.access_key or not frozen.secret_key:
            raise self.missing()
        # botocore refreshes credentials that expire (assume-role, SSO, metadata) itself, when asked: keep them
        self._source = source if hasattr(source, "refresh_needed") else None
        return frozen

    def missing(self, exc: BaseException | None = None) -> ProviderError:
        """The error for a profile with no credentials anywhere: where botocore looked, no secret."""
        session = self._session
        config = _setting(session, "config_file", "AWS_CONFIG_FILE", "~/.aws/config")
        shared = _setting(session, "credentials_file", "AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
        imds = (
            "disabled by AWS_EC2_METADATA_DISABLED"
            if os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true"
            else "not reachable"
        )
        which = f"aws_profile {self.aws_profile!r}" if self.aws_profile else "the default AWS profile"
        detail = f" ({type(exc).__name__})" if exc is not None else ""
        return ProviderError(
            f"no AWS credentials for {self.profile}{detail}: looked in the environment (AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE), {which} in the shared credentials file {shared} "
            f"and the config file {config} (keys, SSO, assume-role, credential_process), container credentials "
            f"(AWS_CONTAINER_CREDENTIALS_*), instance metadata ({imds}); and for a Bedrock API key (api_key, "
            "AWS_BEARER_TOKEN_BEDROCK)",
            error_class=ErrorClass.NON_RETRYABLE,
            provider=self.profile,
            error_type="credentials_missing",
        )


def _setting(session: Session | None, name: str, env: str, default: str) -> str:
    """A botocore path setting as botocore would read it (never a secret)."""
    if session is not None:
        try:
            value = session.get_config_variable(name)
        except BotoCoreError:
            value = None
        if isinstance(value, str):
            return value
    return os.environ.get(env, default)
