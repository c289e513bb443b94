"""SigV4: AWS's published test vectors, botocore's signer and client, and the simulator's verifier agree."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.session import Session

from turnout.providers.aws import sign
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
    assert (
        "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"
        in headers["Authorization"]
    )
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
