"""AWS Signature Version 4 with the standard library: the canonical request, the string to sign, the derived key.

The Bedrock adapter signs each request with :class:`Signer` and the simulator checks signatures with the same
functions (:mod:`turnout.sim.aws`). botocore's ``SigV4Auth`` gives the same signature but costs about 40 µs a
request (an ``AWSRequest`` with ``email.message`` headers, the URL parsed several times, four HMACs to derive the
day's key), which put a signed Bedrock call over its budget against an Anthropic call; here the URL's part of
the canonical request is worked out once per URL and the derived key once per day. What AWS's credential chain
does stays botocore's (:mod:`turnout.providers.aws`): this module only computes signatures.

It is held to botocore's signer by a differential test and to AWS's published test suite
(``tests/providers/test_bedrock_sigv4.py``, ``tests/fixtures/aws_sigv4/vectors.json``). Like botocore's, the
canonical path is the URL's path with dot segments and empty segments removed, then URI-encoded once more
(every service but S3); header values have their runs of whitespace folded into one space.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence
from urllib.parse import quote, unquote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
#: ``X-Amz-Date``'s format.
AMZ_DATE = "%Y%m%dT%H%M%SZ"
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: The headers a request is signed over, without and with a session token (sorted, as SigV4 wants them).
_SIGNED = (
    ("content-type", "host", "x-amz-date"),
    ("content-type", "host", "x-amz-date", "x-amz-security-token"),
)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The key derived for one day (``YYYYMMDD``), region and service."""
    key = _hmac(("AWS4" + secret).encode(), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def _without_dot_segments(path: str) -> str:
    """RFC 3986's dot segments removed, and empty segments too (AWS services take ``//`` as ``/``)."""
    if not path:
        return "/"
    out: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if out:
                out.pop()
        elif segment and segment != ".":
            out.append(segment)
    first = "/" if path[0] == "/" else ""
    last = "/" if path[-1] == "/" and out else ""
    return first + "/".join(out) + last


def canonical_path(raw_path: str) -> str:
    """The canonical URI of a path as sent (its escapes kept): normalised, then encoded once more."""
    return quote(_without_dot_segments(raw_path), safe="/~")


def canonical_query(query: str) -> str:
    """Query parameters sorted by name (then value), each name and value URI-encoded once."""
    pairs = []
    for item in query.split("&") if query else ():
        name, _, value = item.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def host_of(url: str) -> str:
    """The ``Host`` an HTTP client sends for ``url``: the host, lower-cased, with its port unless the default."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = parts.port
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return host


def canonical_request(
    method: str, path: str, query: str, headers: Mapping[str, str], signed: Sequence[str], payload_hash: str
) -> str:
    """The canonical request (``path`` and ``query`` canonical already; ``headers`` by lower-case name)."""
    lines = "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed)
    return f"{method.upper()}\n{path}\n{query}\n{lines}\n{';'.join(signed)}\n{payload_hash}"


def signature(key: bytes, amz_date: str, scope: str, request: str) -> str:
    """The hex signature of a canonical request with the derived ``key`` (``scope``: ``date/region/service/…``)."""
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
    return hmac.digest(key, to_sign.encode(), "sha256").hex()


class Signer:
    """Signs ``POST`` requests for one region and service, keeping the day's derived key and each URL's parts.

    Only ``content-type``, ``host``, ``x-amz-date`` and ``x-amz-security-token`` are signed, as botocore's own
    ``bedrock-runtime`` client signs them (the body's hash is in the canonical request, not in a header): every
    other header a request carries (forwarded, extra, the client's own) stays out of the signature, so none can
    break it.
    """

    __slots__ = ("_key", "_second", "_urls", "region", "service")

    def __init__(self, region: str, service: str) -> None:
        self.region = region
        self.service = service
        self._key: tuple[str, str, bytes] | None = None  # (secret, date, key): one day's, for one secret
        self._second: tuple[int, str] = (-1, "")  # the last second signed in, and its X-Amz-Date
        self._urls: dict[str, tuple[str, str, str]] = {}

    def _url_parts(self, url: str) -> tuple[str, str, str]:
        parts = self._urls.get(url)
        if parts is None:
            split = urlsplit(url)
            if len(self._urls) >= 256:  # URLs are one or two per model: a few, unless ids keep changing
                self._urls.clear()
            parts = self._urls[url] = (host_of(url), canonical_path(split.path), canonical_query(split.query))
        return parts

    def _day_key(self, secret: str, date: str) -> bytes:
        kept = self._key
        if kept is not None and kept[0] == secret and kept[1] == date:
            return kept[2]
        key = signing_key(secret, date, self.region, self.service)
        self._key = (secret, date, key)
        return key

    def sign(
        self,
        access_key: str,
        secret_key: str,
        token: str | None,
        url: str,
        body: bytes,
        content_type: str = "application/json",
        now: float | None = None,
    ) -> dict[str, str]:
        """The headers that sign a ``POST`` of ``body`` to ``url`` at ``now`` (seconds since the epoch)."""
        host, path, query = self._url_parts(url)
        second = int(time.time() if now is None else now)
        if second == self._second[0]:
            amz_date = self._second[1]
        else:
            amz_date = time.strftime(AMZ_DATE, time.gmtime(second))
            self._second = (second, amz_date)
        date = amz_date[:8]
        payload = hashlib.sha256(body).hexdigest()
        scope = f"{date}/{self.region}/{self.service}/aws4_request"
        headers = {"content-type": content_type, "host": host, "x-amz-date": amz_date}
        if token is not None:
            headers["x-amz-security-token"] = token
        signed = _SIGNED[token is not None]
        request = canonical_request("POST", path, query, headers, signed, payload)
        sig = signature(self._day_key(secret_key, date), amz_date, scope, request)
        out = {"Content-Type": content_type, "X-Amz-Date": amz_date}
        if token is not None:
            out["X-Amz-Security-Token"] = token
        names = ";".join(signed)
        out["Authorization"] = f"{ALGORITHM} Credential={access_key}/{scope}, SignedHeaders={names}, Signature={sig}"
        return out
