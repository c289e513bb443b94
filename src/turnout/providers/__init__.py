"""Provider adapters, one module per wire protocol, over one shared HTTP transport.

:func:`build_adapter` picks the adapter for a profile's family (or ``kind``).
"""

from __future__ import annotations

from turnout.config.schema import Profile
from turnout.core.model_ids import cloud_of, vertex_publisher, wire_model
from turnout.core.registry import Family, family_for
from turnout.providers.base import AdapterSettings, HTTPAdapter
from turnout.providers.http import HttpClient


def adapter_class(protocol: str) -> type[HTTPAdapter]:
    """The adapter class implementing ``protocol`` (one of ``registry.PROTOCOLS``)."""
    if protocol == "openai-chat":
        from turnout.providers.openai_chat import OpenAIChatAdapter

        return OpenAIChatAdapter
    if protocol == "openai-responses":
        from turnout.providers.openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter
    if protocol == "anthropic":
        from turnout.providers.anthropic import AnthropicAdapter

        return AnthropicAdapter
    if protocol == "gemini":
        from turnout.providers.gemini import GeminiAdapter

        return GeminiAdapter
    if protocol in ("vertex-anthropic", "vertex-google"):
        from turnout.providers.vertex import VertexAnthropicAdapter, VertexGeminiAdapter

        return VertexAnthropicAdapter if protocol == "vertex-anthropic" else VertexGeminiAdapter
    if protocol == "ollama":
        from turnout.providers.ollama import OllamaAdapter

        return OllamaAdapter
    if protocol == "bedrock":
        from turnout.providers.bedrock import BedrockAdapter

        return BedrockAdapter
    raise ValueError(f"unknown protocol {protocol!r}")


def _protocol(family: Family, profile: Profile) -> str:
    """``wire_api = "responses"`` selects the Responses protocol; a Vertex profile's publisher its wire."""
    if family.protocol == "openai-chat" and profile.wire_api == "responses":
        return "openai-responses"
    if family.protocol == "vertex":
        return f"vertex-{profile.publisher or vertex_publisher(profile.model or '')}"
    return family.protocol


def build_adapter(name: str, profile: Profile, http: HttpClient, api_key: str | None = None) -> HTTPAdapter:
    """The adapter for profile ``name`` (``family.alias``), bound to ``api_key``."""
    settings = AdapterSettings.from_profile(name, profile)
    return adapter_class(_protocol(settings.family, profile))(settings, http, api_key)


def model_problem(name: str, profile: Profile, model: str) -> str | None:
    """Why profile ``name``'s adapter cannot send ``model`` (None: it can); see ``HTTPAdapter.model_problem``."""
    family = family_for(name.partition(".")[0], profile.kind)
    return adapter_class(_protocol(family, profile)).model_problem(model)


def wire_id(name: str, profile: Profile, model: str) -> str:
    """The id profile ``name`` sends for ``model`` (the configured name stays its identity; see ``model_ids``)."""
    family = family_for(name.partition(".")[0], profile.kind)
    return wire_model(cloud_of(family.name, family.protocol), model, profile.region)


__all__ = ["AdapterSettings", "HTTPAdapter", "HttpClient", "adapter_class", "build_adapter", "model_problem", "wire_id"]
