"""Ready-made gateway configurations for coding agents (``turnout init --for <client>``).

Each preset is a whole ``turnout.toml`` that works in one step: the gateway's client key and the upstream key come
from environment variables (never written to the file), and ``[gateway.model_aliases]`` patterns give the model
names the agent sends by default a route (see docs/clients.md). :data:`PRESETS` names them; :func:`preset` returns
one with the lines that say how to start the gateway and the agent.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.core.errors import ConfigError

_CLAUDE_CODE = """\
# turnout.toml for Claude Code (turnout init --for claude-code). Start: turnout serve
default_provider = "anthropic.main"

[gateway]
api_keys = ["${TURNOUT_GATEWAY_KEY}"]   # what Claude Code sends as ANTHROPIC_API_KEY

[gateway.model_aliases]                 # the model names Claude Code sends by default
"claude-haiku-*" = "anthropic.small"
"claude-*" = "anthropic.main"

[providers.models.anthropic.main]
api_key = "${TURNOUT_ANTHROPIC_KEY}"    # your Anthropic key, for the gateway only
model = "claude-sonnet-4-5"

[providers.models.anthropic.small]
api_key = "${TURNOUT_ANTHROPIC_KEY}"
model = "claude-haiku-4-5"
"""

_CODEX = """\
# turnout.toml for Codex CLI (turnout init --for codex). Start: turnout serve
default_provider = "openai.main"

[gateway]
api_keys = ["${TURNOUT_GATEWAY_KEY}"]   # what Codex sends (env_key of its model provider)

[gateway.model_aliases]                 # the model names Codex sends by default
"gpt-*" = "openai.main"

[providers.models.openai.main]
api_key = "${TURNOUT_OPENAI_KEY}"       # your OpenAI key, for the gateway only
model = "gpt-5"
wire_api = "responses"
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    """A configuration for one client, and how to start it.

    Attributes:
        name: The ``--for`` value.
        toml: The whole ``turnout.toml``.
        steps: What to run next, one line each.
    """

    name: str
    toml: str
    steps: tuple[str, ...]


PRESETS: dict[str, Preset] = {
    "claude-code": Preset(
        name="claude-code",
        toml=_CLAUDE_CODE,
        steps=(
            "export TURNOUT_GATEWAY_KEY=<a new secret> TURNOUT_ANTHROPIC_KEY=<your Anthropic key>",
            "turnout serve",
            "ANTHROPIC_BASE_URL=http://127.0.0.1:8787 ANTHROPIC_API_KEY=$TURNOUT_GATEWAY_KEY claude",
        ),
    ),
    "codex": Preset(
        name="codex",
        toml=_CODEX,
        steps=(
            "export TURNOUT_GATEWAY_KEY=<a new secret> TURNOUT_OPENAI_KEY=<your OpenAI key>",
            "turnout serve",
            'add to ~/.codex/config.toml: model_provider = "turnout" and [model_providers.turnout] with '
            'base_url = "http://127.0.0.1:8787/v1", env_key = "TURNOUT_GATEWAY_KEY", wire_api = "responses"',
            "codex",
        ),
    ),
}


def preset(name: str) -> Preset:
    """The preset for the client ``name``.

    Raises:
        ConfigError: No preset has that name (the message lists those that exist).
    """
    found = PRESETS.get(name)
    if found is None:
        known = ", ".join(sorted(PRESETS))
        raise ConfigError(f"no preset for {name[:40]!r}; choose one of: {known}", code="unknown_preset")
    return found
