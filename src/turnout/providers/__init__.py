"""Provider adapters, one module per wire protocol, over one shared HTTP transport.

:func:`build_adapter` picks the adapter for a profile's family (or ``kind``).
"""

from __future__ import annotations

from turnout.config.schema import Profile
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
    if protocol == "ollama":
        from turnout.providers.ollama import OllamaAdapter

        return OllamaAdapter
    raise ValueError(f"unknown protocol {protocol!r}")


def build_adapter(name: str, profile: Profile, http: HttpClient, api_key: str | None = None) -> HTTPAdapter:
    """The adapter for profile ``name`` (``family.alias``), bound to ``api_key``.

    ``wire_api = "responses"`` on an OpenAI-protocol profile selects the Responses adapter.
    """
    settings = AdapterSettings.from_profile(name, profile)
    protocol = settings.family.protocol
    if protocol == "openai-chat" and profile.wire_api == "responses":
        protocol = "openai-responses"
    return adapter_class(protocol)(settings, http, api_key)


__all__ = ["AdapterSettings", "HTTPAdapter", "HttpClient", "adapter_class", "build_adapter"]
