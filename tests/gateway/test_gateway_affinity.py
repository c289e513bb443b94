"""A client's session header keeps its conversation on one pool member through the gateway."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gateway_support import GATEWAY_KEY, fake_gateway, post

from fakes import Alternate, Fleet

POOL = f"""
default_provider = "duo"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[reliability]
provider_retries = 0
[providers.models.openai.a]
api_key = "sk-a"
model = "gpt-4.1"
[providers.models.openai.b]
api_key = "sk-b"
model = "gpt-4.1"
[pools.duo]
members = ["openai.a", "openai.b"]
strategy = "least_busy"
"""


def chat(n: int, **extra: object) -> dict[str, object]:
    return {"model": "", "messages": [{"role": "user", "content": f"question {n}"}], **extra}


def messages(n: int) -> dict[str, object]:
    return {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": f"question {n}"}]}


Body = Callable[[int], dict[str, object]]


@pytest.mark.parametrize(
    ("path", "body", "header"),
    [
        ("/v1/chat/completions", chat, "x-session-id"),
        ("/v1/messages", messages, "X-Claude-Code-Session-Id"),
        ("/v1/chat/completions", chat, "session_id"),
    ],
)
async def test_calls_naming_one_session_go_to_one_member(path: str, body: Body, header: str) -> None:
    """Each call has another first message; one session header: every call goes where the first went.

    Without the header the same calls alternate between the members (each prefix is a conversation of its own).
    """
    fleet = Fleet()
    async with fake_gateway(POOL, fleet, chance=Alternate()) as (server, _):
        named = [await post(server, path, body(n), headers={header: "sess-1"}) for n in range(6)]
        plain = [await post(server, path, body(10 + n)) for n in range(6)]
    assert all(r.status == 200 for r in named + plain)
    assert len({r.headers["x-turnout-provider"] for r in named}) == 1
    assert {r.headers["x-turnout-provider"] for r in plain} == {"openai.a", "openai.b"}


async def test_the_session_header_wins_over_the_bodys_names_and_two_sessions_are_two_conversations() -> None:
    """A prompt_cache_key that changes each call does not split a session; other sessions are spread as usual."""
    fleet = Fleet()
    async with fake_gateway(POOL, fleet, chance=Alternate()) as (server, _):
        one = [
            await post(server, "/v1/chat/completions", chat(n, prompt_cache_key=f"k{n}"), headers={"session-id": "s1"})
            for n in range(4)
        ]
        others = [
            await post(server, "/v1/chat/completions", chat(9), headers={"session-id": f"s{n}"}) for n in range(2, 6)
        ]
    assert len({r.headers["x-turnout-provider"] for r in one}) == 1
    assert {r.headers["x-turnout-provider"] for r in others} == {"openai.a", "openai.b"}  # same prompt, 4 sessions
