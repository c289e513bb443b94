"""The demo's three-cloud stop: one Claude model served by Anthropic, then Bedrock, then Vertex AI.

Three calls to ``hint:clouds``, whose route walks ``anthropic.clouds`` → ``bedrock.clouds`` → ``vertex.clouds``,
all configured with the one name ``claude-sonnet-4-5`` (each cloud is sent its own id for it): the first is
answered by Anthropic; the second finds Anthropic overloaded (529) and is answered by Bedrock; the third also
finds Bedrock throttling (``ThrottlingException``) and is answered by Vertex AI. Bedrock signs with SigV4 from a
Bedrock API key here, Vertex exchanges a service-account key (made for the run) at the simulator's token
endpoint: nothing leaves loopback. The stop needs the ``aws`` and ``gcp`` extras; without them it says so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from turnout.cli.terminal import shown
from turnout.client import Client
from turnout.reply import Reply
from turnout.sim import Simulator

MODEL = "claude-sonnet-4-5"
#: What each cloud is sent for ``MODEL`` (the simulator's script is keyed by what it receives).
BEDROCK_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
#: The profile expected to serve each call, and the script of that call.
CALLS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("Anthropic answers", "anthropic.clouds", {}),
    ("Anthropic is overloaded (529): Bedrock answers", "bedrock.clouds", {MODEL: {"steps": ["529"]}}),
    (
        "Anthropic overloaded, Bedrock throttling (429): Vertex AI answers",
        "vertex.clouds",
        {MODEL: {"steps": ["529"]}, BEDROCK_ID: {"steps": ["429"]}},
    ),
)

_CONFIG = """
[providers.models.anthropic.clouds]
uri = "{url}"
api_key = "sk-ant-demo-clouds"
model = "{model}"
fallback = ["bedrock.clouds"]

[providers.models.bedrock.clouds]
uri = "{url}"
region = "us-east-1"
api_key = "bedrock-demo-api-key"
model = "{model}"
fallback = ["vertex.clouds"]

[providers.models.vertex.clouds]
uri = "{url}"
project = "turnout-demo"
region = "us-east5"
model = "{model}"
credentials_file = "{credentials}"

[[model_routes]]
hint = "clouds"
model_provider = "anthropic.clouds"
model = "{model}"
"""


def available() -> bool:
    """Whether the ``aws`` and ``gcp`` extras (botocore, google-auth) are installed."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in ("botocore", "google.auth"))
    except (ImportError, ValueError):
        return False


def clouds_config(sim: Simulator, directory: Path) -> str:
    """The stop's profiles and route, to append to the demo's config ("" without the extras).

    Writes a service-account key file for the simulator's token endpoint into ``directory``.
    """
    if not available():
        return ""
    from turnout.sim.google import service_account_info

    credentials = directory / "vertex-service-account.json"
    credentials.write_bytes(orjson.dumps(service_account_info(sim.google_token_uri, project="turnout-demo")))
    return _CONFIG.format(url=sim.url, model=MODEL, credentials=credentials)


async def clouds_tour(console: Console, client: Client, sim: Simulator) -> bool:
    """The three calls; prints one row each; True when each was served by the cloud the stop names."""
    if not available():
        console.print("Skipped: this stop needs the aws and gcp extras (pip install 'turnout[aws,gcp]').")
        return True
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for name in ("call", "what happens", "attempts (the last one served)", "served by"):
        table.add_column(name)
    served: list[str] = []
    for n, (title, _, script) in enumerate(CALLS, 1):
        sim.set_script({"models": script})
        reply = await client.chat([{"role": "user", "content": "Summarise the release notes."}], model="hint:clouds")
        served.append(reply.served.provider)
        table.add_row(str(n), title, _attempts(reply), f"{reply.served.provider}/{reply.served.model}")
    console.print(table)
    sent = sorted({e.model for e in sim.log[-6:]})
    console.print(f"One configured name, the ids the clouds were sent: {', '.join(sent)}", markup=False)
    return served == [profile for _, profile, _ in CALLS]


def _attempts(reply: Reply) -> Text:
    return shown(" → ".join(f"{a.provider} {a.status if a.status is not None else a.outcome}" for a in reply.attempts))
