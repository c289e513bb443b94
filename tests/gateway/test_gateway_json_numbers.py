"""Numbers in a request body: what the one JSON parse of every surface lets through, and what it refuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from turnout.gateway.anthropic_surface import AnthropicSurface
from turnout.gateway.bounds import parse_json
from turnout.gateway.embeddings import parse_embedding_request
from turnout.gateway.failures import RequestRejected
from turnout.gateway.openai_surface import OpenAISurface
from turnout.gateway.responses_surface import ResponsesSurface

CHAT: dict[str, Any] = {"model": "", "messages": [{"role": "user", "content": "hi"}]}


def raw_json(body: Any) -> bytes:
    """JSON text with Python's encoder, which writes integers of any size (orjson refuses them)."""
    return json.dumps(body).encode()


def rejection(body: bytes) -> RequestRejected:
    with pytest.raises(RequestRejected) as caught:
        parse_json(body)
    return caught.value


@pytest.mark.parametrize(
    "value",
    [
        2**63 - 1,
        -(2**63),
        [-(2**63), 2**63 - 1, 0],
        [[i % 50_000 for i in range(512)] for _ in range(4)],  # token arrays
        1.5,
        -9.2e18,
        [True, None, "x", 1, 2.5],
        "9" * 40,  # digits in a string are text
        {"deep": [[{"n": 10**18}]]},
    ],
)
def test_numbers_inside_the_signed_64_bit_range_pass(value: Any) -> None:
    """Integers up to the range's ends, floats below 2**63 in magnitude, and long digit runs in strings pass."""
    assert parse_json(raw_json({**CHAT, "seed": value}))["seed"] == value


@pytest.mark.parametrize(
    "value",
    [
        2**63,
        2**64 - 1,
        2**64,
        -(2**63) - 1,
        -(2**70),
        10**30,
        [1, 2, 2**63],
        [[1, 2], [3, -(2**63) - 1]],
        ["x", {"maximum": 2**64}],
        {"deep": [[{"n": 10**30}]]},
        1e19,  # as large as an integer beyond 64 bits once read: the two cannot be told apart
    ],
)
def test_numbers_outside_the_signed_64_bit_range_are_400(value: Any) -> None:
    """An integer outside the signed 64-bit range, anywhere in the body, is a 400 ``integer_out_of_range``."""
    failure = rejection(raw_json({**CHAT, "seed": value})).failure
    assert (failure.status, failure.kind, failure.code) == (400, "invalid_request", "integer_out_of_range")
    assert failure.message == "the request holds an integer outside the signed 64-bit range"


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"])
def test_nan_infinity_and_numbers_beyond_a_double_are_invalid_json(number: bytes) -> None:
    """What JSON has no number for, or a double cannot hold, is refused as invalid JSON."""
    failure = rejection(b'{"model": "", "temperature": ' + number + b"}").failure
    assert (failure.status, failure.message) == (400, "invalid request body: Invalid JSON")


_PARSERS: dict[str, tuple[Callable[[bytes], object], dict[str, Any]]] = {
    "openai": (OpenAISurface().parse, {**CHAT, "max_tokens": 2**64}),
    "anthropic": (AnthropicSurface().parse, {**CHAT, "max_tokens": 2**64}),
    "responses": (ResponsesSurface().parse, {"model": "", "input": "hi", "max_output_tokens": 2**64}),
    "embeddings": (parse_embedding_request, {"model": "", "input": [1, 2, 2**63]}),
}


@pytest.mark.parametrize("name", sorted(_PARSERS))
def test_every_request_parser_refuses_an_integer_beyond_64_bits(name: str) -> None:
    """Each surface and the embeddings endpoint read their body through the same check."""
    parse, body = _PARSERS[name]
    with pytest.raises(RequestRejected) as caught:
        parse(raw_json(body))
    assert caught.value.failure.code == "integer_out_of_range"
