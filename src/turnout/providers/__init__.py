"""Provider adapters, one module per wire protocol, over one shared HTTP transport.

:func:`build_adapter` picks the adapter for a profile's family (or ``kind``).
"""

from __future__ import annotations

import importlib

from turnout.config.schema import Profile
from turnout.core.model_ids import cloud_of, vertex_publisher, wire_model
from turnout.core.registry import Family, family_for
from turnout.providers.base import AdapterSettings, HTTPAdapter
from turnout.providers.http import HttpClient

#: The adapter of each protocol: ``protocol -> (module, class)``, imported when a profile first needs it (a
#: cloud's adapter pulls in its client library only then).
ADAPTERS: dict[str, tuple[str, str]] = {
    "openai-chat": ("turnout.providers.openai_chat", "OpenAIChatAdapter"),
    "openai-responses": ("turnout.providers.openai_responses", "OpenAIResponsesAdapter"),
    "anthropic": ("turnout.providers.anthropic", "AnthropicAdapter"),
    "gemini": ("turnout.providers.gemini", "GeminiAdapter"),
    "vertex-anthropic": ("turnout.providers.vertex", "VertexAnthropicAdapter"),
    "vertex-google": ("turnout.providers.vertex", "VertexGeminiAdapter"),
    "ollama": ("turnout.providers.ollama", "OllamaAdapter"),
    "bedrock": ("turnout.providers.bedrock", "BedrockAdapter"),
}


def adapter_class(protocol: str) -> type[HTTPAdapter]:
    """The adapter class implementing ``protocol`` (a key of :data:`ADAPTERS`)."""
    try:
        module, name = ADAPTERS[protocol]
    except KeyError:
        raise ValueError(f"unknown protocol {protocol!r}") from None
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, type) and issubclass(found, HTTPAdapter)
    return found


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
