"""The AWS side of the simulator: event-stream frames, SigV4 verification and the test credentials.

Written with the standard library only (``zlib``, ``hmac``, ``hashlib``), so the simulator runs without the
``aws`` extra. It is the server's half of what a client does: a frame is a 12-byte prelude (total length,
headers length, the prelude's CRC32), string headers, the payload and the message's CRC32; a signature is
checked by computing it again from the request as received (AWS Signature Version 4: canonical request, string
to sign, the derived key, by :mod:`turnout.providers.sigv4`, which AWS's test suite and botocore's signer hold)
with the credentials the simulator knows.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from turnout.providers import sigv4

#: The simulator's AWS credentials: a client signing with these is accepted.
ACCESS_KEY = "AKIATURNOUTSIM000001"
SECRET_KEY = "turnout-simulator-secret-access-key-0000"
#: A session token the simulator treats as expired (signed requests carrying it get ExpiredTokenException).
EXPIRED_TOKEN = "turnout-sim-expired-session-token"
#: A Bedrock API key prefix the simulator treats as expired.
EXPIRED_BEARER_PREFIX = "expired-"
#: How far a request's ``X-Amz-Date`` may be from the simulator's clock (AWS allows five minutes).
MAX_SKEW_S = 300.0

_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})")


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream frame with string headers (type 7)."""
    raw = b"".join(
        struct.pack(">B", len(name.encode())) + name.encode() + b"\x07" + struct.pack(">H", len(v)) + v
        for name, value in headers.items()
        for v in (value.encode(),)
    )
    total = 16 + len(raw) + len(payload)
    prelude = struct.pack(">II", total, len(raw))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(event_type: str, payload: bytes) -> bytes:
    """An event frame (``:message-type: event``)."""
    return frame({":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}, payload)


def exception(exception_type: str, payload: bytes) -> bytes:
    """An exception frame (``:message-type: exception``), as Bedrock sends a failure inside a 200."""
    headers = {":exception-type": exception_type, ":content-type": "application/json", ":message-type": "exception"}
    return frame(headers, payload)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request's credentials are refused: the AWS error name and its message (a 403)."""

    error_type: str
    message: str


def signature(
    secret: str,
    amz_date: str,
    scope: str,
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    signed: list[str],
    body: bytes,
) -> str:
    """The SigV4 signature of a request as received (``scope``: ``date/region/service/aws4_request``)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    request = sigv4.canonical_request(
        method,
        sigv4.canonical_path(raw_path),
        sigv4.canonical_query(query),
        lowered,
        signed,
        hashlib.sha256(body).hexdigest(),
    )
    date, region, service, _ = scope.split("/")
    return sigv4.signature(sigv4.signing_key(secret, date, region, service), amz_date, scope, request)


def verify(
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    *,
    service: str = "bedrock",
) -> Refusal | None:
    """Whether a request is signed with the simulator's credentials, or carries a Bedrock API key.

    Returns:
        None when it is accepted; else why not, as Bedrock says it.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    auth = lowered.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        token = auth[7:].strip()
        if not token:
            return Refusal("UnrecognizedClientException", "The security token included in the request is invalid.")
        if token.startswith(EXPIRED_BEARER_PREFIX):
            return Refusal("ExpiredTokenException", "The security token included in the request is expired")
        return None
    if not auth:
        return Refusal("MissingAuthenticationTokenException", "Missing Authentication Token")
    m = _AUTH.fullmatch(auth.strip())
    if m is None:
        return Refusal("IncompleteSignatureException", "The Authorization header is not a SigV4 signature.")
    credential, signed_list, given = m.groups()
    key, _, scope = credential.partition("/")
    if key != ACCESS_KEY:
        return Refusal("UnrecognizedClientException", "The security token included in the request is invalid.")
    if lowered.get("x-amz-security-token") == EXPIRED_TOKEN:
        return Refusal("ExpiredTokenException", "The security token included in the request is expired")
    parts = scope.split("/")
    signed = signed_list.split(";")
    amz_date = lowered.get("x-amz-date", "")
    if len(parts) != 4 or parts[2] != service or parts[3] != "aws4_request" or "host" not in signed:
        return Refusal("IncompleteSignatureException", "The credential scope or the signed headers are incomplete.")
    try:
        when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return Refusal("IncompleteSignatureException", "X-Amz-Date is missing or malformed.")
    if amz_date[:8] != parts[0] or abs(when - now) > MAX_SKEW_S:
        return Refusal("InvalidSignatureException", "Signature expired: the request time is too far from now.")
    expected = signature(SECRET_KEY, amz_date, scope, method, raw_path, query, lowered, signed, body)
    if not hmac.compare_digest(expected, given):
        return Refusal(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method.",
        )
    return None
