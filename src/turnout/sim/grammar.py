"""The model-name grammar: ``sim-429-ra2-then-ok`` asks for a behaviour without a script.

::

    model    := "sim-" step ("-then-" step)*        attempt 1 gets the first step, and so on;
                                                     the last step repeats
    step     := head ("-" param)*
    head     := ok | slow | stall | cut | malformed | nodone | inband | empty | refusal | thinkonly
              | reset | silence | flap | <HTTP status, 400-599> | <error name>
    param    := <key><number> | <flag>

Keys: ``t`` tokens (answer words; for context errors the prompt size), ``r`` reasoning words,
``tc`` tool calls, ``tps`` stream pacing, ``a`` units before a stream fault (``flap``: seconds healthy
before the outage), ``d`` delay in seconds (``flap``: seconds down), ``ra`` Retry-After seconds, ``ms``
retry-after-ms, ``s`` status, ``lim`` context limit, ``tail`` a heavy tail's delay in seconds and ``tp`` its
probability (``ok-d0.05-tail2-tp0.04``: 50 ms, or 2 s in 4 % of attempts). Flags: ``len`` (finish by length),
``hard`` (cut drops the connection), ``or`` (OpenRouter-style in-band error), ``prompt`` (Gemini blocks the
prompt), ``silent`` (a ``flap`` outage accepts requests and never answers), and an error name
(``inband-a2-overloaded``). Error names: ``ratelimit quota billing auth forbidden notfound context policy server
badgateway unavailable overloaded``. An outage that starts and ends: ``flap-a10-d30`` answers for 10 s, 503 for
30 s, then answers again; ``flap-a10-d30-silent`` goes silent instead of answering 503.

The same text without ``sim-`` is the short form of a script step: ``steps = ["429-ra2", "ok"]``.
Parsing splits on ``-`` and reads characters; no regular expressions run per request, and parsed
names are cached by :mod:`turnout.sim.scenarios`. This module only turns text into step tables;
:func:`turnout.sim.script.parse_model_name` validates them into a plan.
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import DEFAULT_TOOL_ARGUMENTS, ErrorKind

PREFIX = "sim-"
THEN = "-then-"


class GrammarError(ValueError):
    """A model name or short step string that the grammar cannot read."""


_HEADS = {
    "ok": "ok",
    "slow": "slow",
    "stall": "stall",
    "cut": "cut",
    "malformed": "malformed",
    "nodone": "missing_done",
    "inband": "inband_error",
    "empty": "empty",
    "refusal": "refusal",
    "thinkonly": "think_only",
    "reset": "reset",
    "silence": "silence",
    "flap": "flapping",
}

ERROR_NAMES = {
    "ratelimit": ErrorKind.RATE_LIMIT,
    "quota": ErrorKind.QUOTA,
    "billing": ErrorKind.BILLING,
    "auth": ErrorKind.AUTH,
    "forbidden": ErrorKind.FORBIDDEN,
    "notfound": ErrorKind.NOT_FOUND,
    "context": ErrorKind.CONTEXT_LENGTH,
    "policy": ErrorKind.CONTENT_FILTER,
    "server": ErrorKind.SERVER,
    "badgateway": ErrorKind.BAD_GATEWAY,
    "unavailable": ErrorKind.UNAVAILABLE,
    "overloaded": ErrorKind.OVERLOADED,
}

_INT_KEYS = {"t": "tokens", "r": "reasoning_tokens", "a": "after", "ms": "retry_after_ms", "s": "status"}
_FLOAT_KEYS = {"tps": "tps", "d": "delay", "ra": "retry_after", "tail": "tail", "tp": "tail_p"}
_FLAGS = {
    "len": ("finish", "length"),
    "hard": ("hard", True),
    "or": ("style", "openrouter"),
    "silent": ("mode", "silence"),
}


def _number(text: str, whole: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise GrammarError(f"{whole!r}: {text!r} is not a number") from None


def _split_param(param: str) -> tuple[str, str]:
    i = 0
    while i < len(param) and param[i].isalpha():
        i += 1
    return param[:i], param[i:]


def parse_step_string(text: str) -> dict[str, Any]:
    """The script-step table for one step in short form (``"429-ra2"`` or ``"sim-429-ra2"``).

    Raises:
        GrammarError: The text does not follow the grammar.
    """
    body = text.removeprefix(PREFIX)
    head, *params = body.split("-")
    step: dict[str, Any]
    if head.isdigit():
        step = {"do": "status", "status": int(head)}
    elif head in ERROR_NAMES:
        step = {"do": "status", "error": ERROR_NAMES[head].value}
    elif head in _HEADS:
        step = {"do": _HEADS[head]}
    else:
        raise GrammarError(f"{text!r}: unknown behaviour {head!r}")
    do = step["do"]
    for param in params:
        key, value = _split_param(param)
        if not value:
            if key in _FLAGS:
                name, flag = _FLAGS[key]
                step[name] = flag
            elif key == "prompt":
                step["block"] = "prompt"
            elif key in ERROR_NAMES:
                step["error"] = ERROR_NAMES[key].value
            else:
                raise GrammarError(f"{text!r}: unknown flag {key!r}")
        elif key == "tc":
            count = int(_number(value, text))
            step["tool_calls"] = [
                {"name": "get_weather", "arguments": DEFAULT_TOOL_ARGUMENTS[i % len(DEFAULT_TOOL_ARGUMENTS)]}
                for i in range(count)
            ]
        elif key == "lim":
            step["limit"] = int(_number(value, text))
        elif key == "d":
            step["down" if do == "flapping" else "delay"] = _number(value, text)
        elif key == "a" and do == "flapping":
            step["after"] = _number(value, text)  # seconds healthy before the outage, not units
        elif key in _INT_KEYS:
            step[_INT_KEYS[key]] = int(_number(value, text))
        elif key in _FLOAT_KEYS:
            step[_FLOAT_KEYS[key]] = _number(value, text)
        else:
            raise GrammarError(f"{text!r}: unknown parameter {key!r}")
    if do == "flapping":
        step.setdefault("down", 5.0)
    return step
