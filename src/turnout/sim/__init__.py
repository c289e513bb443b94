"""A fault-injecting LLM provider simulator on loopback.

One aiohttp server speaks OpenAI Chat Completions (and every OpenAI-compatible vendor), OpenAI
Responses, Anthropic Messages, Google Gemini, Ollama and Azure OpenAI, and misbehaves on command:
by model name (``sim-429-ra2``, see :mod:`turnout.sim.grammar`) or by a script mapping model names
to per-attempt steps (:mod:`turnout.sim.script`). Every request is logged
(:class:`SimLogEntry`). ``docs/simulator.md`` describes every behaviour.

Modules: ``simulator`` (lifecycle, in-process API), ``server`` (routes and the fault driver),
``scenarios`` (which behaviour an attempt gets), ``script`` and ``steps`` (script files and their
step schema), ``grammar`` (``sim-`` model names), ``behaviour`` (the runtime form), ``log``, and
``wire/`` (one encoder per protocol).
"""

from turnout.sim.behaviour import ErrorKind, Kind, SimUsage
from turnout.sim.log import SimLogEntry
from turnout.sim.script import Script, load_script
from turnout.sim.simulator import PROTOCOLS, Simulator

__all__ = [
    "PROTOCOLS",
    "ErrorKind",
    "Kind",
    "Script",
    "SimLogEntry",
    "SimUsage",
    "Simulator",
    "load_script",
]
