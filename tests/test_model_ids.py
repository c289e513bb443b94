"""One model, one name: the catalogue of each cloud's id, and the per-cloud beta allow-list."""

from __future__ import annotations

import pytest

from turnout.core.model_ids import CANONICAL, bedrock_prefix, canonical_name, cloud_of, vertex_publisher, wire_model
from turnout.providers.betas import accepted_betas


@pytest.mark.parametrize(
    ("cloud", "region", "wire"),
    [
        ("anthropic", None, "claude-sonnet-4-5"),
        ("vertex", None, "claude-sonnet-4-5@20250929"),
        ("bedrock", "us-east-1", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("bedrock", "eu-central-1", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("bedrock", "ap-northeast-1", "apac.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("bedrock", "global", "global.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("bedrock", "sa-east-1", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ],
)
def test_a_canonical_claude_name_maps_to_each_clouds_id(cloud: str, region: str | None, wire: str) -> None:
    """``claude-sonnet-4-5`` goes as the Anthropic alias, the Vertex version, or the Bedrock profile of the region."""
    assert wire_model(cloud, "claude-sonnet-4-5", region) == wire


def test_a_prefix_the_model_has_no_profile_for_falls_back_to_the_foundation_id() -> None:
    """Opus 4.1 has no global inference profile: region ``global`` sends its foundation-model id."""
    assert wire_model("bedrock", "claude-opus-4-1", "global") == "anthropic.claude-opus-4-1-20250805-v1:0"


@pytest.mark.parametrize(
    "native",
    [
        "claude-sonnet-4-5@20250929",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-3-opus-20240229",
        "my-fine-tune",
        "gemini-2.5-pro-preview-06-05",
    ],
)
@pytest.mark.parametrize("cloud", ["anthropic", "bedrock", "vertex", "gemini", None])
def test_a_native_or_unknown_id_is_sent_as_it_is(native: str, cloud: str | None) -> None:
    """A full native id (or a name the catalogue does not know) is never rewritten."""
    assert wire_model(cloud, native, "us-east-1") == native


def test_gemini_names_are_the_same_on_ai_studio_and_vertex() -> None:
    """Gemini models keep their name on both Google clouds and are not offered on the others."""
    assert wire_model("vertex", "gemini-2.5-pro") == wire_model("gemini", "gemini-2.5-pro") == "gemini-2.5-pro"
    assert wire_model("bedrock", "gemini-2.5-pro", "us-east-1") == "gemini-2.5-pro"


def test_every_clouds_id_leads_back_to_its_canonical_name() -> None:
    """Prices are keyed by the canonical name: every native id of a catalogued model resolves back to it."""
    for name, ids in CANONICAL.items():
        for native in (ids.anthropic, ids.bedrock, ids.vertex, ids.gemini):
            if native is not None:
                assert canonical_name(native) == name
        if ids.bedrock is not None:
            assert canonical_name(f"us.{ids.bedrock}") == name
    assert canonical_name("something-else") == "something-else"


def test_clouds_and_publishers() -> None:
    """Families map to clouds by name or protocol; Vertex's publisher follows the model."""
    assert cloud_of("anthropic", "anthropic") == "anthropic" and cloud_of("claude-proxy", "anthropic") == "anthropic"
    assert cloud_of("vertex", "vertex") == "vertex" and cloud_of("google", "gemini") == "gemini"
    assert cloud_of("openai", "openai-chat") is None
    assert (
        vertex_publisher("claude-haiku-4-5@20251001") == "anthropic" and vertex_publisher("gemini-2.5-pro") == "google"
    )
    assert bedrock_prefix("us-gov-west-1") == "us-gov" and bedrock_prefix(None) is None


def test_betas_pass_only_where_the_cloud_accepts_them() -> None:
    """The Anthropic API gets every beta; Vertex and Bedrock only those on their lists (None: send no header)."""
    header = "prompt-caching-2024-07-31, interleaved-thinking-2025-05-14"
    assert accepted_betas("anthropic", header) == header
    assert accepted_betas("vertex", header) == "interleaved-thinking-2025-05-14"
    assert accepted_betas("bedrock", header) == "interleaved-thinking-2025-05-14"
    assert accepted_betas("vertex", "prompt-caching-2024-07-31") is None
    assert accepted_betas("somewhere-else", header) is None


def test_every_family_sends_the_wire_id_of_the_configured_name() -> None:
    """The Anthropic, Bedrock and Vertex adapters all send the catalogue's id for ``claude-sonnet-4-5``."""
    from turnout.config import load_config_dict
    from turnout.core.types import ChatRequest
    from turnout.providers import HttpClient, build_adapter

    models = {
        "anthropic": {"main": {"api_key": "sk-test-0001", "model": "claude-sonnet-4-5"}},
        "bedrock": {"main": {"region": "eu-west-1", "api_key": "k-0001", "model": "claude-sonnet-4-5"}},
        "vertex": {"main": {"project": "p", "model": "claude-sonnet-4-5"}},
    }
    cfg = load_config_dict({"default_provider": "anthropic.main", "providers": {"models": models}}, env={})
    http = HttpClient()
    built = {n: build_adapter(n, p, http, None) for n, p in cfg.profiles().items()}
    request = ChatRequest.of("hi")
    assert built["anthropic.main"].build_body(request, "claude-sonnet-4-5", None, False)["model"] == "claude-sonnet-4-5"
    assert str(built["bedrock.main"].url("claude-sonnet-4-5", False)).endswith(
        "/model/eu.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    )
    assert (
        built["vertex.main"].url("claude-sonnet-4-5", False).endswith("/models/claude-sonnet-4-5@20250929:rawPredict")
    )


def test_prices_follow_the_canonical_name_on_each_cloud() -> None:
    """``claude-sonnet-4-5`` is priced as each cloud sells it: Bedrock's in-region rate, Vertex's and Anthropic's."""
    from turnout.ledger.pricing import Catalogue

    catalogue = Catalogue()
    anthropic = catalogue.rates("anthropic", "claude-sonnet-4-5")
    bedrock = catalogue.rates("bedrock", "claude-sonnet-4-5")
    vertex = catalogue.rates("vertex", "claude-sonnet-4-5")
    assert anthropic is not None and bedrock is not None and vertex is not None
    assert bedrock.input.base > anthropic.input.base  # Bedrock's regional profiles cost more than the list price
    assert vertex.input.base == anthropic.input.base
    assert catalogue.rates("vertex", "claude-sonnet-4-5@20250929") == vertex  # the native id prices the same
    assert catalogue.context_window("vertex", "gemini-2.5-flash") == catalogue.context_window(
        "gemini", "gemini-2.5-flash"
    )
