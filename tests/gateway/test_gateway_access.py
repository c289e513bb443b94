"""What a client key may use: listed names, pinned profiles, per-key lists, bound senders, daily limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from gateway_support import GATEWAY_KEY, Raw, fake_gateway, get, post

from fakes import Fleet
from turnout import Client
from turnout.config import key_id, load_config_toml
from turnout.core.errors import ConfigError
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.access import ANONYMOUS, Access, Admitted
from turnout.gateway.auth import default_keys, named_keys

TEAM_KEY = "gw-team-key-2"
VIP_KEY = "gw-vip-key-3"
BASE = f"""
default_provider = "openai.main"
[ledger]
enabled = false
[reliability]
provider_retries = 0
[gateway]
api_keys = ["{GATEWAY_KEY}"]
aliases = {{ gpt-4o = "openai.open/gpt-4o", quick = "hint:fast" }}
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
fallback_models = ["gpt-4.1-mini"]
fallback = ["anthropic.backup"]
[providers.models.anthropic.backup]
api_key = "sk-backup"
model = "claude-haiku-4-5"
[providers.models.anthropic.premium]
api_key = "sk-premium"
model = "claude-opus-4-1"
[providers.models.openai.open]
api_key = "sk-open"
[[model_routes]]
hint = "fast"
model_provider = "openai.open"
model = "gpt-4.1-nano"
[senders.vip]
provider = "anthropic.premium"
"""
KEYS = f"""
[gateway.keys.team]
key = "{TEAM_KEY}"
models = ["hint:fast", "gpt-4o"]
[gateway.keys.vip]
key = "{VIP_KEY}"
sender = "vip"
"""
CHAT: dict[str, Any] = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES: dict[str, Any] = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def served(fleet: Fleet, text: str = BASE + KEYS, **options: Any) -> AsyncIterator[GatewayServer]:
    async with fake_gateway(text, fleet, **options) as (server, _):
        yield server


def served_by(raw: Raw) -> tuple[str, str]:
    assert raw.status == 200, raw.body
    return raw.headers["x-turnout-provider"], raw.headers["x-turnout-model"]


def listed(raw: Raw) -> list[str]:
    return [m["id"] for m in raw.json()["data"]]


@pytest.mark.parametrize(
    "model",
    [
        "o1-pro",  # a plain model on the pinned default profile
        "openai.main/o1-pro",  # another model for a pinned profile
        "anthropic.backup",  # a profile that is only a fallback
        "hint:unknown",
        "openai.nope",
    ],
)
async def test_unlisted_names_are_404_in_each_surface_shape(model: str) -> None:
    """By default a name /v1/models does not list is 404 model_not_found, and nothing goes upstream."""
    fleet = Fleet()
    async with served(fleet) as server:
        oa = await post(server, "/v1/chat/completions", {**CHAT, "model": model})
        an = await post(server, "/v1/messages", {**MESSAGES, "model": model})
    assert oa.status == an.status == 404
    assert oa.json()["error"]["code"] == "model_not_found"
    assert oa.json()["error"]["param"] == "model"
    assert an.json()["type"] == "error" and an.json()["error"]["type"] == "not_found_error"
    assert all(not p.calls for p in fleet.built.values())


async def test_models_lists_exactly_what_the_default_access_serves() -> None:
    """/v1/models lists hints, profiles (not fallback-only ones), the default's models and aliases; each is served."""
    fleet = Fleet()
    async with served(fleet) as server:
        ids = listed(await get(server, "/v1/models"))
        answers = {m: await post(server, "/v1/chat/completions", {**CHAT, "model": m}) for m in ids}
        anthropic_ids = [m["id"] for m in (await get_anthropic(server, "/v1/models")).json()["data"]]
    assert ids == [
        "hint:fast",
        "openai.main",
        "openai.open",
        "anthropic.premium",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4o",
        "quick",
    ]
    assert anthropic_ids == ids
    assert {m: a.status for m, a in answers.items()} == {m: 400 if m == "openai.open" else 200 for m in ids}
    assert answers["openai.open"].json()["error"]["code"] == "missing_model"  # unpinned: name one after '/'
    assert served_by(answers["gpt-4o"]) == ("openai.open", "gpt-4o")
    assert served_by(answers["quick"]) == ("openai.open", "gpt-4.1-nano")
    assert served_by(answers["gpt-4.1-mini"]) == ("openai.main", "gpt-4.1-mini")


async def get_anthropic(server: GatewayServer, path: str) -> Raw:
    import aiohttp

    headers = {"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as session, session.get(server.url + path, headers=headers) as resp:
        from multidict import CIMultiDictProxy

        body = await resp.read()
        return Raw(resp.status, CIMultiDictProxy(resp.headers.copy()), body)


async def test_each_listed_name_serves_the_model_it_lists() -> None:
    """With default_model overriding the default profile's model, naming that profile serves what is listed."""
    fleet = Fleet()
    text = BASE.replace(
        'default_provider = "openai.main"\n', 'default_provider = "openai.main"\ndefault_model = "gpt-4.1-mini"\n'
    )
    async with served(fleet, text) as server:
        items = (await get(server, "/v1/models")).json()["data"]
        pinned = {m["id"]: m["turnout"]["model"] for m in items if m["turnout"]["model"] is not None}
        answers = {m: served_by(await post(server, "/v1/chat/completions", {**CHAT, "model": m}))[1] for m in pinned}
        default = served_by(await post(server, "/v1/chat/completions", CHAT))[1]
    assert pinned["openai.main"] == "gpt-4.1-mini" == default
    assert answers == pinned


async def test_an_unpinned_profile_serves_the_model_named_after_its_slash() -> None:
    """family.alias/<model> reaches a profile without a pinned model; a pinned one serves only its pin."""
    fleet = Fleet()
    async with served(fleet) as server:
        raw = await post(server, "/v1/chat/completions", {**CHAT, "model": "openai.open/gpt-4.1-nano"})
    assert served_by(raw) == ("openai.open", "gpt-4.1-nano")


async def test_a_key_lists_and_uses_only_its_models() -> None:
    """[gateway.keys.team] models: its /v1/models lists exactly those, anything else is 404 for it."""
    fleet = Fleet()
    async with served(fleet) as server:
        ids = listed(await get(server, "/v1/models", key=TEAM_KEY))
        fast = await post(server, "/v1/chat/completions", {**CHAT, "model": "hint:fast"}, key=TEAM_KEY)
        alias = await post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-4o"}, key=TEAM_KEY)
        denied = [
            (await post(server, "/v1/chat/completions", {**CHAT, "model": m}, key=TEAM_KEY)).status
            for m in ("openai.main", "", "gpt-4.1", "openai.open/gpt-4o")
        ]
        one = await get(server, "/v1/models/gpt-4o", key=TEAM_KEY)
        hidden = await get(server, "/v1/models/openai.main", key=TEAM_KEY)
        plain = await post(server, "/v1/chat/completions", {**CHAT, "model": "openai.main"})
    assert ids == ["hint:fast", "gpt-4o"]
    assert served_by(fast) == ("openai.open", "gpt-4.1-nano")
    assert served_by(alias) == ("openai.open", "gpt-4o")
    assert denied == [404, 404, 404, 404]
    assert one.json()["turnout"] == {"kind": "alias", "provider": "openai.open", "model": "gpt-4o"}
    assert hidden.status == 404
    assert served_by(plain) == ("openai.main", "gpt-4.1")  # the plain api_keys key keeps the default access


async def test_the_responses_and_count_tokens_endpoints_obey_the_same_access() -> None:
    """A key limited to its models gets 404 on /v1/responses and /v1/messages/count_tokens for anything else."""
    fleet = Fleet()
    async with served(fleet) as server:
        responses = await post(server, "/v1/responses", {"model": "openai.main", "input": "hi"}, key=TEAM_KEY)
        allowed = await post(server, "/v1/responses", {"model": "gpt-4o", "input": "hi"}, key=TEAM_KEY)
        count = await post(
            server,
            "/v1/messages/count_tokens",
            {"model": "anthropic.premium", "messages": [{"role": "user", "content": "hi"}]},
            key=TEAM_KEY,
            headers={"anthropic-version": "2023-06-01"},
        )
    assert (responses.status, count.status) == (404, 404)
    assert responses.json()["error"]["code"] == "model_not_found"
    assert allowed.status == 200 and served_by(allowed) == ("openai.open", "gpt-4o")
    assert fleet.calls("anthropic.premium") == [] and fleet.calls("openai.main") == []


@pytest.mark.parametrize(
    "body",
    [
        {"model": "x" * 257, "input": "hi"},
        {"model": "gpt-4o", "input": "hi", "max_output_tokens": "10"},
        {"model": "gpt-4o", "input": "hi", "stream": "yes"},
        {"model": "gpt-4o", "input": "hi", "user": "u" * 401},
    ],
)
async def test_the_responses_surface_bounds_and_never_coerces_client_fields(body: dict[str, Any]) -> None:
    """/v1/responses takes no over-long model or user, and no string where a number or a boolean belongs."""
    fleet = Fleet()
    async with served(fleet) as server:
        raw = await post(server, "/v1/responses", body)
    assert raw.status == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    assert all(not p.calls for p in fleet.built.values())


async def test_a_client_cannot_claim_a_sender_tier() -> None:
    """`user` / `metadata.user_id` never select a [senders] tier; a key's bound sender always does."""
    fleet = Fleet()
    async with served(fleet) as server:
        claimed = await post(server, "/v1/chat/completions", {**CHAT, "user": "vip"})
        claimed_an = await post(server, "/v1/messages", {**MESSAGES, "metadata": {"user_id": "vip"}})
        bound = await post(server, "/v1/chat/completions", {**CHAT, "user": "someone-else"}, key=VIP_KEY)
        bound_an = await post(server, "/v1/messages", MESSAGES, key=VIP_KEY)
        named = await post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-4.1-mini"}, key=VIP_KEY)
    assert served_by(claimed)[0] == served_by(claimed_an)[0] == "openai.main"
    assert served_by(bound)[0] == served_by(bound_an)[0] == "anthropic.premium"
    assert served_by(named) == ("openai.main", "gpt-4.1-mini")  # a named model stays with its profile


async def test_allow_any_model_keeps_the_open_routing() -> None:
    """allow_any_model = true: any plain model, and another model for a pinned profile, go upstream."""
    fleet = Fleet()
    text = BASE.replace("[gateway]\n", "[gateway]\nallow_any_model = true\n")
    async with served(fleet, text) as server:
        plain = await post(server, "/v1/chat/completions", {**CHAT, "model": "o1-pro"})
        override = await post(server, "/v1/chat/completions", {**CHAT, "model": "anthropic.backup/claude-x"})
    assert served_by(plain) == ("openai.main", "o1-pro")
    assert served_by(override) == ("anthropic.backup", "claude-x")


GEMINI = f"""
default_provider = "gemini.free"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[providers.models.gemini.free]
api_key = "sk-gemini"
"""


@pytest.mark.parametrize("model", ["gemini.free/../../../admin?x=", "../../admin", "gemini.free/a#b", "a:b"])
async def test_a_model_that_cannot_go_in_the_upstream_path_is_400(model: str) -> None:
    """A client-chosen model for Gemini (which puts it in the URL) that could leave its segment is a 400."""
    fleet = Fleet()
    async with served(fleet, GEMINI) as server:
        raw = await post(server, "/v1/chat/completions", {**CHAT, "model": model})
        ok = await post(server, "/v1/chat/completions", {**CHAT, "model": "gemini.free/gemini-2.5-flash"})
    assert raw.status == 400, raw.body
    assert raw.json()["error"]["code"] == "invalid_model"
    assert served_by(ok) == ("gemini.free", "gemini-2.5-flash")
    assert fleet.calls("gemini.free") == ["gemini-2.5-flash"]


LIMITED = f"""
[gateway.keys.capped]
key = "{TEAM_KEY}"
daily_limit_usd = 2.0
"""
PRICED = "pricing = { input = 100000.0, output = 100000.0 }\n"  # a fake answer (10 in, 5 out) costs $1.50


async def test_a_daily_limit_is_enforced_from_the_ledger(tmp_path: Path) -> None:
    """Once a key's spend reaches its limit it gets 429 (also after a restart); other keys are not affected."""
    text = (
        BASE.replace("[ledger]\nenabled = false\n", f'[ledger]\npath = "{tmp_path / "ledger.sqlite3"}"\n').replace(
            'model = "gpt-4.1"\n', 'model = "gpt-4.1"\n' + PRICED
        )
        + LIMITED
    )
    async with served(Fleet(), text, ledger=True) as server:
        statuses = [(await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status for _ in range(3)]
        refused = await post(server, "/v1/messages", MESSAGES, key=TEAM_KEY)
        other = await post(server, "/v1/chat/completions", CHAT)
    async with served(Fleet(), text, ledger=True) as server:
        after_restart = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
    assert statuses == [200, 200, 429]
    assert refused.status == 429 and refused.json()["error"]["type"] == "rate_limit_error"
    assert other.status == 200
    assert after_restart.status == 429
    body = after_restart.json()["error"]
    assert body["code"] == "daily_limit_exceeded"
    assert "capped" in body["message"] and "$2.00" in body["message"]
    assert 1 <= int(after_restart.headers["Retry-After"]) <= 86400


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ('[gateway.aliases]\nx = "hint:nope"\n', "gateway.aliases.x"),
        ('[gateway.aliases]\nx = "openai.nope/m"\n', "gateway.aliases.x"),
        ('[gateway.aliases]\n"openai.main" = "hint:fast"\n', "gateway.aliases.openai.main"),
        ('[gateway.aliases]\n"gpt-4.1" = "hint:fast"\n', "gateway.aliases.gpt-4.1"),
        (f'[gateway.keys.t]\nkey = "{TEAM_KEY}"\nmodels = ["o1-pro"]\n', "gateway.keys.t.models[0]"),
        (f'[gateway.keys.t]\nkey = "{TEAM_KEY}"\nsender = "nobody"\n', "gateway.keys.t.sender"),
        (f'[gateway.keys.t]\nkey = "{TEAM_KEY}"\ndaily_limit_usd = 1.0\n', "gateway.keys.t.daily_limit_usd"),
        (f'[gateway.keys.t]\nkey = "{GATEWAY_KEY}"\n', "gateway.keys.t.key"),
        ('[gateway.keys.t]\nkey = "${GW_UNSET_KEY}"\n', "gateway.keys.t.key"),
    ],
)
def test_an_access_rule_that_names_nothing_configured_fails_at_start(extra: str, path: str) -> None:
    """An alias, key model, sender, limit without a ledger or duplicate/missing key fails with its key path."""
    toml = BASE.replace('aliases = { gpt-4o = "openai.open/gpt-4o", quick = "hint:fast" }\n', "") + extra
    client = Client.from_toml(toml, adapter_builder=Fleet(), ledger=False)
    with pytest.raises(ConfigError) as info:
        Gateway(client)
    assert info.value.path == path
    assert TEAM_KEY not in str(info.value) and GATEWAY_KEY not in str(info.value)


def test_a_listed_name_is_admitted_as_its_route_with_the_key_s_sender() -> None:
    """Each listed name of each key is admitted as the route it names, with the key's bound sender (made once)."""
    config = load_config_toml(BASE + KEYS)
    access = Access(config)
    callers = [c for _, c in access.callers(default_keys(config), named_keys(config))] + [access.caller(ANONYMOUS)]
    assert {c.sender for c in callers} == {None, "vip"}
    for caller in callers:
        assert caller.names
        for name, public in caller.names.items():
            assert access.admit(caller, name) == Admitted(public.choice.model, public.choice.provider, caller.sender)


@pytest.mark.parametrize("key", [GATEWAY_KEY, VIP_KEY])
@pytest.mark.parametrize(
    "body",
    [
        CHAT,
        {"model": "hint:fast", "temperature": 0.5, "max_tokens": 9, "user": "u-1", "messages": CHAT["messages"]},
        {"model": "gpt-4o", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": CHAT["messages"]},
    ],
)
async def test_a_call_gets_the_same_options_whole_or_streamed(
    monkeypatch: pytest.MonkeyPatch, key: str, body: dict[str, Any]
) -> None:
    """The options a request's call gets (route, sender, settings, caller) are the same whether it streams or not."""
    seen: dict[str, dict[str, Any]] = {}
    real_chat, real_stream = Client.chat, Client.stream

    async def chat(self: Client, messages: Any, **options: Any) -> Any:
        seen["chat"] = options
        return await real_chat(self, messages, **options)

    def stream(self: Client, messages: Any, **options: Any) -> Any:
        seen["stream"] = options
        return real_stream(self, messages, **options)

    monkeypatch.setattr(Client, "chat", chat)
    monkeypatch.setattr(Client, "stream", stream)
    async with served(Fleet()) as server:
        assert (await post(server, "/v1/chat/completions", body, key=key)).status == 200
        assert (await post(server, "/v1/chat/completions", {**body, "stream": True}, key=key)).status == 200
    whole, streamed = seen["chat"], seen["stream"]
    assert streamed.pop("show_reasoning") is True
    assert whole.pop("call_id") != streamed.pop("call_id")  # each request's own id
    native, streamed_native = whole.pop("native"), streamed.pop("native")
    assert native.body == body and streamed_native.body == {**body, "stream": True}
    assert (native.protocol, native.headers, native.only) == (
        streamed_native.protocol,
        streamed_native.headers,
        streamed_native.only,
    )
    assert whole == streamed
    assert whole["caller"] in ("vip", key_id(GATEWAY_KEY))


@pytest.mark.parametrize("limit", [None, "daily_limit_usd", "max_call_usd", "rpm", "tpm"])
def test_a_caller_is_limited_by_any_of_its_bounds(limit: str | None) -> None:
    """Any one of the four bounds makes a caller's calls reserve their worst case first; none leaves it unlimited."""
    from turnout.gateway.access import Caller

    bounds: dict[str, Any] = {limit: 1} if limit is not None else {}
    assert Caller(name="k", names={}, open_profiles=frozenset(), **bounds).limited is (limit is not None)


def test_a_small_limit_reads_as_its_amount_not_as_zero() -> None:
    """A $0.001 limit and $0.0012 spent are written as such (two decimals read "$0.00 ... ($0.00 spent today)")."""
    from turnout.gateway.access import Caller, daily_limit, max_call

    caller = Caller(name="k", names={}, open_profiles=frozenset(), daily_limit_usd=0.001, max_call_usd=0.0005)
    refusal = daily_limit(caller, 0.0012, held=0.00003)
    assert "limit of $0.001000" in refusal.message and "($0.001200 spent today" in refusal.message
    assert "$0.000030 held by calls in flight" in refusal.message and "$0.00 " not in refusal.message
    assert (
        "up to $0.000700" in max_call(caller, 0.0007).message
        and "the $0.000500 one call" in max_call(caller, 0.0007).message
    )
