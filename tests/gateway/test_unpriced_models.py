"""A key with a spend limit never spends at an unknown price: a 400 naming the model before anything is sent."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway_support import GATEWAY_KEY, post

from fakes import FakeClock
from turnout import Client
from turnout.config.schema import Pricing
from turnout.core.embeddings import EmbeddingLimits, Embeddings, EmbedRequest
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, Final, StreamEvent, TextDelta, Usage, UsageEvent
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.access import Access
from turnout.ledger.pricing import Catalogue, Rates, rates_from_pricing

TEAM_KEY = "gw-team-key-unpriced"
UNPRICED = "house-model-unpriced-7"  # no pricing table names it, nor does the catalogue


class Upstream(Provider):
    """A fake upstream that answers at once and counts every call that reaches it, with the model sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.sent.append(model)
        return ChatResponse(text="ok", model=model, usage=Usage(input_tokens=10, output_tokens=5))

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        self.sent.append(model)
        yield TextDelta(text="ok")
        yield UsageEvent(usage=Usage(input_tokens=10, output_tokens=5))
        yield Final()

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities(streaming=True)

    def embedding_limits(self, model: str | None = None) -> EmbeddingLimits | None:
        return EmbeddingLimits(max_inputs=16)

    async def embed(self, request: EmbedRequest, model: str) -> Embeddings:
        self.sent.append(model)
        return Embeddings(vectors=[[0.5, 0.5]] * len(request.inputs), usage=Usage(input_tokens=10))


class HouseCatalogue(Catalogue):
    """A price list of the operator's own: it prices the house model only (USD 1 in, 2 out per million tokens)."""

    rates_of_house = rates_from_pricing(Pricing(input=1.0, output=2.0))

    def rates(self, family: str, model: str) -> Rates | None:
        return self.rates_of_house if model == UNPRICED else None

    def embedding_rates(self, family: str, model: str) -> Rates | None:
        return self.rates(family, model)

    def context_window(self, family: str, model: str) -> int | None:
        return None


def config(ledger: Path, profiles: str, *, default: str = "openai.main") -> str:
    return (
        f'default_provider = "{default}"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n'
        f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\ndaily_limit_usd = 5.0\n' + profiles
    )


def profile(name: str, model: str | None = None, extra: str = "") -> str:
    pinned = f'model = "{model}"\n' if model is not None else ""
    return f'[providers.models.openai.{name}]\napi_key = "sk-up"\n{pinned}{extra}'


@asynccontextmanager
async def served(text: str, upstream: Upstream, catalogue: Catalogue | None = None) -> AsyncIterator[GatewayServer]:
    clock = FakeClock()
    client = Client.from_toml(
        text,
        adapter_builder=lambda *_: upstream,
        env=clock.env,
        surface="gateway",
        catalogue=catalogue,
    )
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


def chat(model: str, **more: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **more}


async def test_a_limited_key_s_call_to_an_unpriced_model_is_a_400_naming_it_and_nothing_is_sent(tmp_path: Path) -> None:
    """A limited key's call to an unpriced model is a 400 naming it, with no upstream call; an unlimited key's works."""
    upstream = Upstream()
    async with served(config(tmp_path / "l.sqlite3", profile("main", UNPRICED)), upstream) as server:
        refused = await post(server, "/v1/chat/completions", chat("openai.main"), key=TEAM_KEY)
        streamed = await post(server, "/v1/chat/completions", chat("openai.main", stream=True), key=TEAM_KEY)
        anthropic = await post(server, "/v1/messages", chat("openai.main"), key=TEAM_KEY)
        assert upstream.sent == []
        open_ = await post(server, "/v1/chat/completions", chat("openai.main"), key=GATEWAY_KEY)
    for response in (refused, streamed):
        assert response.status == 400
        error = response.json()["error"]
        assert error["code"] == "model_unpriced" and error["param"] == "model"
        assert UNPRICED in error["message"] and "pricing" in error["message"]
        assert "providers.models.openai.main" in error["message"]
    assert anthropic.status == 400 and UNPRICED in anthropic.json()["error"]["message"]
    assert open_.status == 200
    assert upstream.sent == [UNPRICED]


async def test_one_unpriced_entry_of_the_route_is_enough_to_refuse(tmp_path: Path) -> None:
    """A priced primary with an unpriced fallback model is refused too (the reservation is a worst case)."""
    upstream = Upstream()
    text = config(tmp_path / "l.sqlite3", profile("main", "gpt-4.1", f'fallback_models = ["{UNPRICED}"]\n'))
    async with served(text, upstream) as server:
        refused = await post(server, "/v1/chat/completions", chat("gpt-4.1"), key=TEAM_KEY)
    assert refused.status == 400
    assert UNPRICED in refused.json()["error"]["message"]
    assert upstream.sent == []


async def test_a_client_chosen_model_is_checked_and_a_pricing_table_admits_any_model(tmp_path: Path) -> None:
    """A client-chosen model is served when priced, refused when not; a ``pricing`` table prices any model."""
    upstream = Upstream()
    profiles = profile("main") + profile("own", UNPRICED, "pricing = { input = 1.0, output = 2.0 }\n")
    async with served(config(tmp_path / "l.sqlite3", profiles), upstream) as server:
        known = await post(server, "/v1/chat/completions", chat("openai.main/gpt-4.1"), key=TEAM_KEY)
        unknown = await post(server, "/v1/chat/completions", chat(f"openai.main/{UNPRICED}-b"), key=TEAM_KEY)
        own = await post(server, "/v1/chat/completions", chat("openai.own"), key=TEAM_KEY)
    assert known.status == 200, known.body
    assert unknown.status == 400 and f"{UNPRICED}-b" in unknown.json()["error"]["message"]
    assert own.status == 200, own.body
    assert upstream.sent == ["gpt-4.1", UNPRICED]


async def test_a_limited_key_may_embed_with_a_model_priced_per_input_token(tmp_path: Path) -> None:
    """An embedding model the catalogue prices per input token only is priced for an embedding call: served."""
    upstream = Upstream()
    async with served(config(tmp_path / "l.sqlite3", profile("main")), upstream) as server:
        body = {"model": "openai.main/text-embedding-3-small", "input": ["a", "b"]}
        response = await post(server, "/v1/embeddings", body, key=TEAM_KEY)
        unpriced = await post(
            server, "/v1/embeddings", {"model": f"openai.main/{UNPRICED}", "input": "a"}, key=TEAM_KEY
        )
    assert response.status == 200, response.body
    assert unpriced.status == 400 and UNPRICED in unpriced.json()["error"]["message"]
    assert upstream.sent == ["text-embedding-3-small"]


async def test_the_client_s_own_prices_decide_and_nothing_is_sent_at_an_unknown_one(tmp_path: Path) -> None:
    """The prices the call is walked with decide: the client's catalogue, not another; a refusal is counted."""
    upstream = Upstream()
    text = config(tmp_path / "l.sqlite3", profile("main"))
    async with served(text, upstream, catalogue=HouseCatalogue()) as server:
        house = await post(server, "/v1/chat/completions", chat(f"openai.main/{UNPRICED}"), key=TEAM_KEY)
        elsewhere = await post(server, "/v1/chat/completions", chat("openai.main/gpt-4.1"), key=TEAM_KEY)
        embedded = await post(server, "/v1/embeddings", {"model": "openai.main/gpt-4.1", "input": "a"}, key=TEAM_KEY)
        rejections = dict(server.gateway.access.rejections)
    assert house.status == 200, house.body
    for refused in (elsewhere, embedded):
        assert refused.status == 400, refused.body
        error = refused.json()["error"]
        assert error["code"] == "model_unpriced" and "'gpt-4.1'" in error["message"]
    assert upstream.sent == [UNPRICED]
    assert rejections == {("team", "unpriced"): 2}


def test_check_warns_of_the_unpriced_entries_of_the_routes_the_client_builds(tmp_path: Path) -> None:
    """A limited key's names are routed by the client (a hint to a pool, a sender's tier) and priced as calls are."""
    text = (
        'default_provider = "openai.main"\ndefault_model = "gpt-4.1-mini"\n'
        f'[ledger]\npath = "{tmp_path / "l.sqlite3"}"\n'
        '[senders.vip]\nprovider = "crowd"\n'
        '[pools.crowd]\nmembers = ["openai.p1", "openai.p2"]\n'
        '[[model_routes]]\nhint = "fast"\nmodel_provider = "crowd"\nmodel = "house"\n'
        f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\nmax_call_usd = 1.0\nmodels = ["hint:fast"]\n'
        f'[gateway.keys.vip]\nkey = "gw-vip"\nmax_call_usd = 1.0\nsender = "vip"\nmodels = ["openai.p2"]\n'
        f'[gateway.keys.free]\nkey = "gw-free"\nrpm = 5\nmodels = ["hint:fast"]\n'
        + profile("main")
        + profile("p1", UNPRICED, 'fallback_models = ["gpt-4o"]\n')
        + profile("p2", None, "pricing = { input = 1.0, output = 2.0 }\n")
    )
    client = Client.from_toml(text, adapter_builder=lambda *_: Upstream(), catalogue=HouseCatalogue())
    warnings = Access(client.config).check(client)
    named = sorted((w.path, w.message.partition(" reaches ")[2].partition(",")[0]) for w in warnings)
    assert named == [
        ("gateway.keys.team", "openai.p1/gpt-4o"),  # p1's fallback model; p1's own is the catalogue's
        ("gateway.keys.vip", "openai.p1/gpt-4o"),  # the tier's pool, on the default route
    ], warnings
    assert all(w.code == "limited_key_unpriced_model" for w in warnings)
    assert Access(client.config).check() == []  # without routes: only what needs none (no open unpriced profile)
