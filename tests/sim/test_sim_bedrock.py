"""The simulator speaks Bedrock Converse: signatures and API keys checked, event-stream frames, exception frames."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from botocore.credentials import ReadOnlyCredentials
from botocore.eventstream import EventStreamBuffer
from yarl import URL

from aws_signing import botocore_sign
from turnout.sim import Simulator
from turnout.sim.aws import ACCESS_KEY, EXPIRED_TOKEN, SECRET_KEY

BODY = orjson.dumps({"messages": [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]})


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A simulator on a free loopback port."""
    async with Simulator() as simulator:
        yield simulator


def _url(sim: Simulator, model: str, stream: bool = False) -> str:
    model = model.replace(":", "%3A")
    return f"{sim.url}/model/{model}/{'converse-stream' if stream else 'converse'}"


async def _post(url: str, headers: dict[str, str], body: bytes = BODY) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(URL(url, encoded=True), data=body, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


def _signed(url: str, token: str | None = None, secret: str = SECRET_KEY) -> dict[str, str]:
    return botocore_sign(ReadOnlyCredentials(ACCESS_KEY, secret, token), "us-east-1", url, BODY)


def _frames(body: bytes) -> list[tuple[dict[str, Any], Any]]:
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return [(m.headers, orjson.loads(m.payload)) for m in buffer]


async def test_signed_converse_answers(sim: Simulator) -> None:
    """A SigV4-signed Converse request gets a ConverseResponse; the log names the access key's id."""
    url = _url(sim, "anthropic.claude-3-5-sonnet-20240620-v1:0")
    status, _, body = await _post(url, _signed(url))
    assert status == 200
    answer = orjson.loads(body)
    assert answer["output"]["message"]["content"] == [{"text": "Hello from the Turnout simulator."}]
    assert answer["stopReason"] == "end_turn" and answer["usage"]["outputTokens"] == 5
    (entry,) = await sim.wait_for_log(1)
    assert (entry.protocol, entry.model, entry.outcome) == (
        "bedrock",
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        "ok",
    )
    assert entry.key_id is not None


@pytest.mark.parametrize(
    ("headers", "error_type"),
    [
        ({}, "MissingAuthenticationTokenException"),
        ({"Authorization": "Bearer expired-key"}, "ExpiredTokenException"),
        ({"Authorization": "AWS4-HMAC-SHA256 nonsense"}, "IncompleteSignatureException"),
    ],
)
async def test_unacceptable_credentials_get_a_403(sim: Simulator, headers: dict[str, str], error_type: str) -> None:
    """No credential, an expired API key or a malformed signature: 403 with Bedrock's error name."""
    status, got, body = await _post(_url(sim, "sim-ok"), headers)
    assert status == 403
    assert got["x-amzn-ErrorType"].startswith(error_type + ":")
    assert orjson.loads(body)["message"]


async def test_wrong_secret_and_expired_session_token(sim: Simulator) -> None:
    """A signature made with another secret does not match; an expired session token is refused as expired."""
    url = _url(sim, "sim-ok")
    status, got, _ = await _post(url, _signed(url, secret="wrong-secret"))
    assert (status, got["x-amzn-ErrorType"].split(":")[0]) == (403, "InvalidSignatureException")
    status, got, _ = await _post(url, _signed(url, token=EXPIRED_TOKEN))
    assert (status, got["x-amzn-ErrorType"].split(":")[0]) == (403, "ExpiredTokenException")


async def test_stream_is_event_stream_frames(sim: Simulator) -> None:
    """ConverseStream answers with CRC-valid frames ending in messageStop and metadata."""
    url = _url(sim, "sim-ok-r3-tc1", stream=True)
    status, headers, body = await _post(url, {"Authorization": "Bearer sim-key-0001"})
    assert status == 200 and headers["Content-Type"] == "application/vnd.amazon.eventstream"
    frames = _frames(body)
    kinds = [h[":event-type"] for h, _ in frames]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    assert frames[-2][1] == {"stopReason": "tool_use"}
    assert "contentBlockStart" in kinds
    assert any("reasoningContent" in p.get("delta", {}) for _, p in frames)


async def test_throttling_status_and_exception_frame(sim: Simulator) -> None:
    """A 429 carries ThrottlingException; an in-band rate limit is a throttlingException frame after the units."""
    status, headers, _ = await _post(_url(sim, "sim-429"), {"Authorization": "Bearer sim-key-0001"})
    assert (status, headers["x-amzn-ErrorType"].split(":")[0]) == (429, "ThrottlingException")
    status, _, body = await _post(_url(sim, "sim-inband-a2-ratelimit", stream=True), {"Authorization": "Bearer k-1"})
    frames = _frames(body)
    assert status == 200
    assert frames[-1][0][":message-type"] == "exception"
    assert frames[-1][0][":exception-type"] == "throttlingException"
    assert sum(1 for h, _ in frames if h.get(":event-type") == "contentBlockDelta") == 2


async def test_malformed_stream_has_a_frame_with_a_bad_crc(sim: Simulator) -> None:
    """The malformed behaviour sends a frame whose CRC does not match: botocore's decoder refuses it."""
    from botocore.eventstream import ChecksumMismatch

    _, _, body = await _post(_url(sim, "sim-malformed-a1", stream=True), {"Authorization": "Bearer k-1"})
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    with pytest.raises(ChecksumMismatch):
        list(buffer)
