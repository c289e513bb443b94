"""Bedrock credentials: botocore's chain off the event loop, kept and refreshed; API keys; the aws extra."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import RefreshableCredentials
from provider_kit import RecordingServer, Reply, fixture_path, make_adapter

from turnout.config import load_config_dict
from turnout.core.errors import ConfigError, ErrorClass, ProviderError
from turnout.core.types import ChatRequest
from turnout.providers import HttpClient, aws
from turnout.providers.bedrock import BedrockAdapter

MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
ANSWER = fixture_path("bedrock/converse_text.json").read_bytes()


def _adapter(http: HttpClient, uri: str, **profile: Any) -> BedrockAdapter:
    made = make_adapter(http, "bedrock", uri, api_key=None, region="us-east-1", **profile)
    assert isinstance(made, BedrockAdapter)
    return made


def test_session_sees_no_developer_credentials_or_metadata() -> None:
    """The test session switches the metadata lookup off and points botocore at empty files."""
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"
    assert Path(os.environ["AWS_CONFIG_FILE"]).read_text() == ""
    assert Path(os.environ["AWS_SHARED_CREDENTIALS_FILE"]).read_text() == ""
    assert "AWS_ACCESS_KEY_ID" not in os.environ


async def test_no_credentials_anywhere_fails_fast_naming_where_it_looked(
    http: HttpClient, server: RecordingServer
) -> None:
    """No credentials in any source: a non-retryable error naming the profile and the sources, before any request."""
    adapter = _adapter(http, server.url)
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        await adapter.chat(ChatRequest.of("hi"), MODEL)
    assert time.monotonic() - started < 5.0
    error = info.value
    assert error.error_class is ErrorClass.NON_RETRYABLE and error.error_type == "credentials_missing"
    for looked in (
        "bedrock.test",
        "AWS_ACCESS_KEY_ID",
        os.environ["AWS_SHARED_CREDENTIALS_FILE"],
        "SSO",
        "instance metadata (disabled by AWS_EC2_METADATA_DISABLED)",
        "AWS_BEARER_TOKEN_BEDROCK",
    ):
        assert looked in error.message
    assert server.requests == []


async def test_environment_credentials_sign_the_request(
    http: HttpClient, server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys in the environment sign the request: SigV4 over the escaped path, with the session token."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "environment-token")
    server.reply(Reply(pieces=(ANSWER,)))
    answer = await _adapter(http, server.url).chat(ChatRequest.of("hi"), MODEL)
    assert answer.text.startswith("Let me count")
    sent = server.requests[0]
    assert sent.raw_path == "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIAENVIRONMENT00001/")
    assert "/us-east-1/bedrock/aws4_request" in sent.headers["authorization"]
    assert sent.headers["x-amz-security-token"] == "environment-token"


async def test_shared_credentials_file_and_aws_profile(
    http: HttpClient, server: RecordingServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``aws_profile`` picks a profile of the shared credentials file; an unknown one is named in the error."""
    credentials = tmp_path / "credentials"
    credentials.write_text("[team]\naws_access_key_id = AKIAFROMTHEFILE00001\naws_secret_access_key = file-secret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    server.reply(Reply(pieces=(ANSWER,)))
    await _adapter(http, server.url, aws_profile="team").chat(ChatRequest.of("hi"), MODEL)
    assert "Credential=AKIAFROMTHEFILE00001/" in server.requests[0].headers["authorization"]
    with pytest.raises(ProviderError) as info:
        await _adapter(http, server.url, aws_profile="nobody").chat(ChatRequest.of("hi"), MODEL)
    assert "aws_profile 'nobody'" in info.value.message and "ProfileNotFound" in info.value.message


async def test_credentials_are_resolved_once_off_the_event_loop(
    http: HttpClient, server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain runs in a worker thread, once: later calls sign with the kept credentials."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    threads: list[int] = []
    original = aws.AwsCredentials._resolve

    def resolve(self: aws.AwsCredentials) -> Any:
        threads.append(threading.get_ident())
        return original(self)

    monkeypatch.setattr(aws.AwsCredentials, "_resolve", resolve)
    server.reply(*(Reply(pieces=(ANSWER,)) for _ in range(3)))
    adapter = _adapter(http, server.url)
    await asyncio.gather(*(adapter.chat(ChatRequest.of("hi"), MODEL) for _ in range(3)))
    assert len(threads) == 1 and threads[0] != threading.get_ident()
    assert len(server.requests) == 3


async def test_expiring_credentials_are_refreshed_by_botocore_in_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that expire are handed back to botocore's refresh (in a thread) once the recheck time passed."""
    refreshed: list[int] = []

    def metadata(key: str, minutes: int) -> dict[str, str]:
        expiry = datetime.now(UTC) + timedelta(minutes=minutes)
        return {"access_key": key, "secret_key": "s", "token": "t", "expiry_time": expiry.isoformat()}

    def refresh() -> dict[str, str]:
        refreshed.append(threading.get_ident())
        return metadata(f"AKIAREFRESHED{len(refreshed):07d}", 60)

    source = RefreshableCredentials.create_from_metadata(metadata("AKIAFIRST0000000001", 1), refresh, "test")
    monkeypatch.setattr(aws.Session, "get_credentials", lambda self: source)
    now = [0.0]
    creds = aws.AwsCredentials("bedrock.test", None, clock=lambda: now[0])
    first = await creds.get()
    assert first.access_key.startswith("AKIAREFRESHED")  # a minute left is inside botocore's refresh window
    assert await creds.get() is first  # kept: no thread, no refresh
    now[0] += aws.RECHECK_S + 1
    assert (await creds.get()).access_key == first.access_key  # botocore decides: an hour left needs no refresh
    assert len(refreshed) == 1 and refreshed[0] != threading.get_ident()


async def test_expired_token_is_resolved_anew_and_tried_once_more(
    http: HttpClient, server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 403 ExpiredTokenException drops the kept credentials; the call is made once more with fresh ones."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    expired = Reply(
        status=403,
        headers={"Content-Type": "application/json", "x-amzn-ErrorType": "ExpiredTokenException"},
        pieces=(b'{"message":"The security token included in the request is expired"}',),
    )
    server.reply(expired, Reply(pieces=(ANSWER,)))
    answer = await _adapter(http, server.url).chat(ChatRequest.of("hi"), MODEL)
    assert answer.text and len(server.requests) == 2


async def test_bedrock_api_key_is_a_bearer_token(http: HttpClient, server: RecordingServer) -> None:
    """A Bedrock API key is sent as ``Authorization: Bearer`` and nothing is signed."""
    server.reply(Reply(pieces=(ANSWER,)))
    adapter = make_adapter(http, "bedrock", server.url, api_key="bedrock-api-key-0001", region="us-west-2")
    await adapter.chat(ChatRequest.of("hi"), MODEL)
    headers = server.requests[0].headers
    assert headers["authorization"] == "Bearer bedrock-api-key-0001"
    assert "x-amz-date" not in headers


async def test_bearer_token_from_the_environment(
    http: HttpClient, server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an api_key, ``AWS_BEARER_TOKEN_BEDROCK`` is the Bedrock API key."""
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-env-key-0002")
    server.reply(Reply(pieces=(ANSWER,)))
    await _adapter(http, server.url).chat(ChatRequest.of("hi"), MODEL)
    assert server.requests[0].headers["authorization"] == "Bearer bedrock-env-key-0002"


def test_import_turnout_does_not_import_botocore() -> None:
    """Botocore (the aws extra) is imported only when a Bedrock adapter is built."""
    code = (
        "import sys, turnout, turnout.providers, turnout.config, turnout.sim\n"
        "assert 'botocore' not in sys.modules, 'botocore imported'\n"
        "import turnout.providers.bedrock\n"
        "assert 'botocore' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_bedrock_profile_needs_a_region() -> None:
    """A Bedrock profile without a region is refused when the config loads, with the key path."""
    with pytest.raises(ConfigError) as info:
        load_config_dict({"providers": {"models": {"bedrock": {"main": {"model": MODEL}}}}}, env={})
    assert info.value.path == "providers.models.bedrock.main.region"
    with pytest.raises(ConfigError) as bad:
        load_config_dict({"providers": {"models": {"bedrock": {"main": {"region": "us-east-1.evil.com"}}}}}, env={})
    assert bad.value.path == "providers.models.bedrock.main.region"


def test_a_bedrock_profile_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without botocore installed, a Bedrock profile is a config error that says which extra to install."""
    import importlib.util

    from turnout.config import loader

    real = importlib.util.find_spec
    monkeypatch.setattr(
        loader.importlib.util, "find_spec", lambda name, *a: None if name == "botocore" else real(name, *a)
    )
    with pytest.raises(ConfigError) as info:
        load_config_dict({"providers": {"models": {"bedrock": {"main": {"region": "us-east-1"}}}}}, env={})
    assert "pip install 'turnout[aws]'" in str(info.value)
    assert info.value.code == "missing_extra"


async def test_a_chain_that_found_nothing_is_not_asked_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials: later calls fail at once with the same error, the chain asked again only after the recheck."""
    asked: list[int] = []
    original = aws.AwsCredentials._resolve

    def resolve(self: aws.AwsCredentials) -> Any:
        asked.append(1)
        return original(self)

    monkeypatch.setattr(aws.AwsCredentials, "_resolve", resolve)
    now = [0.0]
    creds = aws.AwsCredentials("bedrock.test", None, clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(ProviderError) as info:
            await creds.get()
        assert info.value.error_type == "credentials_missing"
    assert len(asked) == 1
    now[0] += aws.RECHECK_S + 1
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIALATER00000000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "later-secret")
    assert (await creds.get()).access_key == "AKIALATER00000000001"
    assert len(asked) == 2
