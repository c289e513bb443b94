"""One model, one name: the id each cloud knows a canonical model by.

A profile may name a model by its canonical name (``claude-sonnet-4-5``, ``gemini-2.5-pro``) on any family
that serves it: the Anthropic API, AWS Bedrock or Google Vertex AI. :func:`wire_model` is the one place that
turns the configured name into the id sent on the wire (an Anthropic alias, a Bedrock inference profile for
the profile's region, a Vertex versioned id); a name it does not know, a full native id included, is sent as
it is. The configured name stays the requested and served identity (records, notices, headers, prices).

Sources: Anthropic's model overview (the API alias, the Bedrock id and the Vertex id of every Claude model),
AWS's list of cross-region inference profiles (the ``us.`` / ``eu.`` / ``apac.`` / ``global.`` prefixes) and
Google's Vertex AI model pages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The clouds a canonical name maps onto, as :func:`cloud_of` names a family.
CLOUDS = ("anthropic", "bedrock", "vertex", "gemini")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelIds:
    """What one canonical model is called on each cloud (None: that cloud does not serve it).

    Attributes:
        anthropic: The Anthropic API id or alias.
        bedrock: The Bedrock foundation-model id, without an inference-profile prefix.
        vertex: The Vertex AI publisher model id (``claude-sonnet-4-5@20250929``, ``gemini-2.5-pro``).
        gemini: The Gemini API (Google AI Studio) id.
        geo_prefixes: The inference-profile prefixes Bedrock offers for it (``us``, ``eu``, ``apac``, ``global``).
    """

    anthropic: str | None = None
    bedrock: str | None = None
    vertex: str | None = None
    gemini: str | None = None
    geo_prefixes: tuple[str, ...] = ("us", "eu", "apac")


def _claude(alias: str, snapshot: str, *, bedrock_version: str = "v1:0", geo: tuple[str, ...] = ()) -> ModelIds:
    """A Claude model: ``claude-x-y`` with its ``YYYYMMDD`` snapshot on each cloud."""
    stem = alias.removesuffix("-0")
    return ModelIds(
        anthropic=alias,
        bedrock=f"anthropic.{stem}-{snapshot}-{bedrock_version}",
        vertex=f"{stem}@{snapshot}",
        geo_prefixes=("us", "eu", "apac", *geo),
    )


def _gemini(name: str) -> ModelIds:
    return ModelIds(vertex=name, gemini=name, geo_prefixes=())


#: Canonical name → the id on each cloud.
CANONICAL: Mapping[str, ModelIds] = {
    "claude-opus-4-5": _claude("claude-opus-4-5", "20251101", geo=("global",)),
    "claude-sonnet-4-5": _claude("claude-sonnet-4-5", "20250929", geo=("global",)),
    "claude-haiku-4-5": _claude("claude-haiku-4-5", "20251001", geo=("global",)),
    "claude-opus-4-1": _claude("claude-opus-4-1", "20250805"),
    "claude-opus-4": _claude("claude-opus-4-0", "20250514"),
    "claude-sonnet-4": _claude("claude-sonnet-4-0", "20250514", geo=("global",)),
    "claude-3-7-sonnet": ModelIds(
        anthropic="claude-3-7-sonnet-latest",
        bedrock="anthropic.claude-3-7-sonnet-20250219-v1:0",
        vertex="claude-3-7-sonnet@20250219",
    ),
    "claude-3-5-haiku": ModelIds(
        anthropic="claude-3-5-haiku-latest",
        bedrock="anthropic.claude-3-5-haiku-20241022-v1:0",
        vertex="claude-3-5-haiku@20241022",
        geo_prefixes=("us",),
    ),
    "gemini-2.5-pro": _gemini("gemini-2.5-pro"),
    "gemini-2.5-flash": _gemini("gemini-2.5-flash"),
    "gemini-2.5-flash-lite": _gemini("gemini-2.5-flash-lite"),
    "gemini-2.0-flash": _gemini("gemini-2.0-flash"),
}

#: Every cloud's id of a catalogued model → its canonical name (the way back, for prices).
_BY_NATIVE: Mapping[str, str] = {
    native: name
    for name, ids in CANONICAL.items()
    for native in (ids.anthropic, ids.bedrock, ids.vertex, ids.gemini)
    if native is not None
}
_GEO = ("us", "eu", "apac", "global", "us-gov", "jp", "au")


def cloud_of(family: str, protocol: str) -> str | None:
    """The cloud whose ids a profile's family uses (None: a family the catalogue does not map).

    A family speaking the Anthropic protocol (the API, or a compatible proxy) takes Anthropic ids; ``bedrock``
    and ``vertex`` their own; the Gemini protocol the Gemini API's.
    """
    if family in ("bedrock", "vertex"):
        return family
    if protocol == "anthropic":
        return "anthropic"
    if protocol == "gemini":
        return "gemini"
    return None


def bedrock_prefix(region: str | None) -> str | None:
    """The inference-profile prefix for an AWS region (``us-east-1`` → ``us``); None when there is none."""
    if not region:
        return None
    if region == "global":
        return "global"
    if region.startswith("us-gov-"):
        return "us-gov"
    for start, prefix in (("us-", "us"), ("ca-", "us"), ("eu-", "eu"), ("ap-", "apac")):
        if region.startswith(start):
            return prefix
    return None


def wire_model(cloud: str | None, model: str, region: str | None = None) -> str:
    """The id to send for ``model`` on ``cloud`` (a :data:`CLOUDS` name): the catalogue's, else ``model`` itself.

    On Bedrock a catalogued Claude model is sent as the inference profile of the profile's region
    (``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` for ``us-east-1``; ``global.…`` for region ``global``), or
    as the foundation-model id where no profile covers the region. A native id, or a name the catalogue does
    not know, is returned unchanged.
    """
    ids = CANONICAL.get(model)
    if ids is None or cloud is None:
        return model
    if cloud == "bedrock":
        if ids.bedrock is None:
            return model
        prefix = bedrock_prefix(region)
        return f"{prefix}.{ids.bedrock}" if prefix in ids.geo_prefixes else ids.bedrock
    native: str | None = getattr(ids, cloud, None) if cloud in CLOUDS else None
    return native or model


def canonical_name(model: str) -> str:
    """The canonical name of ``model`` (a canonical name, or any cloud's id of it); else ``model`` itself."""
    if model in CANONICAL:
        return model
    found = _BY_NATIVE.get(model)
    if found is not None:
        return found
    head, dot, rest = model.partition(".")
    if dot and head in _GEO:  # a Bedrock inference profile: its foundation model
        return _BY_NATIVE.get(rest, model)
    return model


def vertex_publisher(model: str) -> str:
    """The Vertex AI publisher serving ``model``: ``anthropic`` for Claude, else ``google``."""
    return "anthropic" if canonical_name(model).startswith("claude") else "google"
