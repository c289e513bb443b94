"""The family table: which wire protocol and default endpoint each family uses, and what it needs to be called.

Data only (no HTTP imports), so configuration validation can consult it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Wire protocols Turnout speaks.
PROTOCOLS = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama", "bedrock", "vertex")


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """How to talk to one provider family.

    Attributes:
        name: The family name as written in ``[providers.models.<family>.<alias>]``.
        protocol: One of :data:`PROTOCOLS`.
        base_url: The default endpoint (the adapter appends its own path).
        needs_key: Whether a profile of this family must have a credential.
        vendor: The OpenAI-compatible vendor whose quirks apply, if any.
        extra: The ``turnout[...]`` extra the family's client library comes from, if any.
        extra_module: The module that extra installs (looked up, never imported, when the config loads).
    """

    name: str
    protocol: str
    base_url: str
    needs_key: bool = True
    vendor: str | None = None
    extra: str | None = None
    extra_module: str | None = None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(name="openai", protocol="openai-chat", base_url="https://api.openai.com/v1"),
        Family(name="anthropic", protocol="anthropic", base_url="https://api.anthropic.com"),
        Family(
            name="gemini",
            protocol="gemini",
            base_url="https://generativelanguage.googleapis.com/v1beta",
        ),
        Family(
            name="google",
            protocol="gemini",
            base_url="https://generativelanguage.googleapis.com/v1beta",
        ),
        Family(name="ollama", protocol="ollama", base_url="http://127.0.0.1:11434", needs_key=False),
        Family(
            name="openrouter",
            protocol="openai-chat",
            base_url="https://openrouter.ai/api/v1",
            vendor="openrouter",
        ),
        Family(name="deepseek", protocol="openai-chat", base_url="https://api.deepseek.com", vendor="deepseek"),
        Family(name="groq", protocol="openai-chat", base_url="https://api.groq.com/openai/v1", vendor="groq"),
        Family(name="mistral", protocol="openai-chat", base_url="https://api.mistral.ai/v1", vendor="mistral"),
        Family(name="xai", protocol="openai-chat", base_url="https://api.x.ai/v1", vendor="xai"),
        Family(name="together", protocol="openai-chat", base_url="https://api.together.xyz/v1", vendor="together"),
        Family(name="azure", protocol="openai-chat", base_url="", vendor="azure"),
        # the endpoint follows the profile's region (bedrock-runtime.<region>.amazonaws.com); credentials come
        # from the AWS chain when no Bedrock API key is given
        Family(name="bedrock", protocol="bedrock", base_url="", needs_key=False),
        # Google Vertex AI: the endpoint comes from the region, the credential from Application Default Credentials
        Family(
            name="vertex",
            protocol="vertex",
            base_url="https://aiplatform.googleapis.com",
            needs_key=False,
            extra="gcp",
            extra_module="google.auth",
        ),
    )
}

#: ``kind`` values a profile may set, and the protocol each selects.
KINDS: dict[str, str] = {
    "openai": "openai-chat",
    "openai-chat": "openai-chat",
    "openai-compatible": "openai-chat",
    "openai-responses": "openai-responses",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "ollama": "ollama",
    "azure": "openai-chat",
    "bedrock": "bedrock",
}


def family_for(name: str, kind: str | None) -> Family:
    """The family description for a profile, with ``kind`` overriding the protocol.

    Raises:
        KeyError: The family is unknown and no ``kind`` says how to talk to it.
    """
    known = FAMILIES.get(name)
    if kind is None:
        if known is None:
            raise KeyError(name)
        return known
    protocol = KINDS[kind]
    if known is not None:
        if known.protocol == protocol and kind != "azure":
            return known
        return Family(
            name=name,
            protocol=protocol,
            base_url=known.base_url,
            needs_key=known.needs_key,
            vendor="azure" if kind == "azure" else known.vendor,
        )
    own = ("openai", "anthropic", "gemini", "ollama", "bedrock")
    defaults = {f.protocol: f for f in FAMILIES.values() if f.name in own}
    base = defaults.get(protocol, FAMILIES["openai"])
    return Family(
        name=name,
        protocol=protocol,
        base_url="",
        needs_key=base.needs_key,
        vendor="azure" if kind == "azure" else None,
    )
