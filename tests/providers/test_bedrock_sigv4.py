"""SigV4: AWS's test vectors, botocore's signer and client, Turnout's signer and the simulator's verifier agree."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.session import Session
from hypothesis import given, settings
from hypothesis import strategies as st

from aws_signing import botocore_sign
from turnout.providers import sigv4
from turnout.providers.sigv4 import Signer
from turnout.sim import aws as sim_aws

VECTORS = orjson.loads((Path(__file__).resolve().parents[1] / "fixtures" / "aws_sigv4" / "vectors.json").read_bytes())
MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
SIM = ReadOnlyCredentials(sim_aws.ACCESS_KEY, sim_aws.SECRET_KEY, None)


def _parts(authorization: str) -> tuple[str, list[str], str]:
    credential = authorization.split("Credential=")[1].split(",")[0]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    return credential.partition("/")[2], signed, authorization.rsplit("Signature=", 1)[1]


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_simulator_verifier_matches_the_aws_test_suite(vector: dict[str, Any]) -> None:
    """The simulator's SigV4 computes the signature AWS's own test suite publishes for each request."""
    scope, signed, expected = _parts(vector["authorization"])
    got = sim_aws.signature(
        VECTORS["secret_key"],
        VECTORS["amz_date"],
        scope,
        vector["method"],
        vector["path"],
        vector["query"],
        vector["headers"],
        signed,
        vector["body"].encode(),
    )
    assert got == expected


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_botocore_signer_matches_the_aws_test_suite(vector: dict[str, Any]) -> None:
    """Botocore's SigV4Auth, the signer the Bedrock adapter uses, gives the published signature."""
    query = f"?{vector['query']}" if vector["query"] else ""
    request = AWSRequest(
        method=vector["method"],
        url=f"https://example.amazonaws.com{vector['path']}{query}",
        headers=dict(vector["headers"]),
        data=vector["body"].encode(),
    )
    request.context["timestamp"] = VECTORS["amz_date"]
    auth = SigV4Auth(Credentials(VECTORS["access_key"], VECTORS["secret_key"]), VECTORS["service"], VECTORS["region"])
    canonical = auth.canonical_request(request)
    assert auth.signature(auth.string_to_sign(request, canonical), request) == _parts(vector["authorization"])[2]


def sign(
    credentials: ReadOnlyCredentials, region: str, url: str, body: bytes, now: float | None = None
) -> dict[str, str]:
    """The adapter's signer (one per region, as each Bedrock adapter has)."""
    token = credentials.token
    return Signer(region, "bedrock").sign(credentials.access_key, credentials.secret_key, token, url, body, now=now)


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_turnout_signer_matches_the_aws_test_suite(vector: dict[str, Any]) -> None:
    """The canonical request, the derived key and the signature of :mod:`turnout.providers.sigv4` give AWS's value."""
    scope, signed, expected = _parts(vector["authorization"])
    headers = {k.lower(): v for k, v in vector["headers"].items()}
    request = sigv4.canonical_request(
        vector["method"],
        sigv4.canonical_path(vector["path"]),
        sigv4.canonical_query(vector["query"]),
        headers,
        signed,
        hashlib.sha256(vector["body"].encode()).hexdigest(),
    )
    key = sigv4.signing_key(VECTORS["secret_key"], VECTORS["amz_date"][:8], VECTORS["region"], VECTORS["service"])
    assert sigv4.signature(key, VECTORS["amz_date"], scope, request) == expected


_SEGMENT = st.text(alphabet="abcAZ09-_.~:%3 +@!$&'()*,;=é/", min_size=1, max_size=12)
_MOMENT = st.integers(min_value=1_500_000_000, max_value=2_200_000_000)


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https"]),
    host=st.sampled_from(["127.0.0.1", "bedrock-runtime.us-east-1.amazonaws.com", "VPCE-1.Example.com", "[::1]"]),
    port=st.sampled_from([None, 80, 443, 8080]),
    segments=st.lists(_SEGMENT, min_size=1, max_size=4),
    query=st.sampled_from(["", "b=2&a=1", "x=%3A&y"]),
    body=st.binary(max_size=200),
    token=st.sampled_from([None, "FwoGZXIvYXdzEJr//////////token", "a  b\tc"]),
    region=st.sampled_from(["us-east-1", "eu-central-1"]),
    content_type=st.sampled_from(["application/json", "application/x-amz-json-1.1"]),
    now=_MOMENT,
)
def test_turnout_signer_agrees_with_botocore(
    scheme: str,
    host: str,
    port: int | None,
    segments: list[str],
    query: str,
    body: bytes,
    token: str | None,
    region: str,
    content_type: str,
    now: int,
) -> None:
    """For any URL (escapes, dot segments, ports, IPv6), body, session token and moment: botocore's very headers."""
    netloc = host if port is None else f"{host}:{port}"
    path = "/" + "/".join(quote(s, safe="%:/.~") for s in segments)
    url = f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")
    credentials = ReadOnlyCredentials("AKIAEXAMPLE000000001", "secret/with+chars", token)
    ours = Signer(region, "bedrock").sign(
        credentials.access_key, credentials.secret_key, token, url, body, content_type, now=now
    )
    theirs = botocore_sign(credentials, region, url, body, content_type=content_type, now=now)
    assert ours == theirs


def test_the_kept_key_follows_the_day_and_the_secret() -> None:
    """One signer across midnight and a rotated secret: every signature is still botocore's."""
    signer = Signer("us-east-1", "bedrock")
    url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m%3A0/converse"
    midnight = 1_764_633_600  # 2025-12-02T00:00:00Z
    for secret, moment in [("one", midnight - 1), ("one", midnight), ("two", midnight + 5), ("one", midnight + 9)]:
        got = signer.sign("AKIAEXAMPLE000000001", secret, None, url, b"{}", now=moment)
        want = botocore_sign(
            ReadOnlyCredentials("AKIAEXAMPLE000000001", secret, None), "us-east-1", url, b"{}", now=moment
        )
        assert got == want


def _url(port: int = 8080) -> str:
    return f"http://127.0.0.1:{port}/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"


def _check(url: str, headers: dict[str, str], body: bytes, **extra: str) -> sim_aws.Refusal | None:
    parts = urlsplit(url)
    sent = {**headers, "Host": parts.netloc, **extra}
    return sim_aws.verify("POST", parts.path, parts.query, sent, body, time.time())


def test_signed_request_is_accepted_with_its_escaped_model_id() -> None:
    """A request signed by the adapter's signer passes the simulator's check, ``%3A`` in the path included."""
    body = b'{"messages":[]}'
    headers = sign(SIM, "us-east-1", _url(), body)
    assert _check(_url(), headers, body) is None


def test_only_the_needed_headers_are_signed() -> None:
    """Only host, content-type, the body hash and x-amz-date (and the token) are signed: forwarded headers are free."""
    body = b"{}"
    headers = sign(
        ReadOnlyCredentials(sim_aws.ACCESS_KEY, sim_aws.SECRET_KEY, "session-token"), "us-east-1", _url(), body
    )
    assert "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token," in headers["Authorization"]
    assert headers["X-Amz-Security-Token"] == "session-token"
    forwarded = {"X-Forwarded-For": "10.0.0.1", "anthropic-beta": "prompt-caching-2024-07-31", "User-Agent": "x/1"}
    assert _check(_url(), headers, body, **forwarded) is None


def test_a_changed_body_or_path_is_refused() -> None:
    """The signature covers the body and the escaped path: changing either is an InvalidSignatureException."""
    headers = sign(SIM, "us-east-1", _url(), b"{}")
    refused = _check(_url(), headers, b'{"x":1}')
    assert refused is not None and refused.error_type == "InvalidSignatureException"
    unescaped = _url().replace("%3A", ":")
    refused = _check(unescaped, headers, b"{}")
    assert refused is not None and refused.error_type == "InvalidSignatureException"


def test_wrong_secret_and_unknown_key_are_refused() -> None:
    """Another secret gives another signature; another access key is not known."""
    body = b"{}"
    wrong = sign(ReadOnlyCredentials(sim_aws.ACCESS_KEY, "not-the-secret", None), "us-east-1", _url(), body)
    assert _check(_url(), wrong, body) == sim_aws.Refusal(
        "InvalidSignatureException",
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
        "Access Key and signing method.",
    )
    unknown = sign(ReadOnlyCredentials("AKIAUNKNOWN000000000", "x", None), "us-east-1", _url(), body)
    refused = _check(_url(), unknown, body)
    assert refused is not None and refused.error_type == "UnrecognizedClientException"


def test_botocore_client_sends_the_same_path_and_passes_the_check() -> None:
    """Botocore's own bedrock-runtime client escapes the model id as the adapter does, and its signature verifies."""
    session = Session()
    client = session.create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:8080",
        aws_access_key_id=sim_aws.ACCESS_KEY,
        aws_secret_access_key=sim_aws.SECRET_KEY,
    )
    seen: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> AWSResponse:
        seen["url"], seen["headers"], seen["body"] = request.url, dict(request.headers), request.body
        answer = (Path(__file__).resolve().parents[1] / "fixtures" / "bedrock" / "converse_text.json").read_bytes()
        return AWSResponse(request.url, 200, {"Content-Type": "application/json"}, _Raw(answer))

    client.meta.events.register("before-send.bedrock-runtime.Converse", capture)
    client.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert urlsplit(seen["url"]).path == urlsplit(_url()).path
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in seen["headers"].items()}
    body = seen["body"] if isinstance(seen["body"], bytes) else seen["body"].encode()
    assert (
        sim_aws.verify("POST", urlsplit(seen["url"]).path, "", {**headers, "Host": "127.0.0.1:8080"}, body, time.time())
        is None
    )


class _Raw:
    """The raw body of a canned botocore response."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data
