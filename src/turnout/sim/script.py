"""The simulator's script: which behaviour each attempt on a model gets.

A script maps model names to a sequence of per-attempt steps::

    attempts_per = "model"             # or "model_key": count attempts per (model, API key)
    seed = 7                           # optional: seeds the draws of heavy-tailed delays (tail, tail_p)

    [cache]                            # optional: prompt caching per deployment (turnout.sim.caching)
    ttl = 300                          # seconds a prompt prefix stays cached

    [models."flaky"]
    steps = [{ do = "status", status = 429, retry_after = 2 }, { do = "ok", text = "hi" }]
    after_last = "repeat"              # or "cycle"
    headroom = { requests = 3, window = 20 }   # optional: budgets announced in headers (turnout.sim.headroom)

A step is a table with a ``do`` key, or the short string form of the model-name grammar
(``"429-ra2"``, see :mod:`turnout.sim.grammar`). Scripts are validated with pydantic when they are
loaded; errors raise :class:`turnout.core.errors.ConfigError` naming the key path, e.g.
``models."flaky".steps[0].retry_after``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from turnout.core.errors import ConfigError
from turnout.sim.behaviour import Behaviour
from turnout.sim.grammar import PREFIX, THEN, GrammarError, parse_step_string
from turnout.sim.headroom import Limits
from turnout.sim.steps import STEP_TAGS, OkStep, ScriptModel, Step, to_behaviour

SCRIPT_ERROR_CODE = "invalid_sim_script"


@dataclass(frozen=True, slots=True)
class Plan:
    """The runtime form of one model's steps.

    Attributes:
        steps: One behaviour per attempt.
        cycle: After the last step, start again (True) or repeat the last step (False).
        limits: The model's rate-limit budgets, announced in headers (None: none).
    """

    steps: tuple[Behaviour, ...]
    cycle: bool = False
    limits: Limits | None = None

    def pick(self, attempt: int) -> Behaviour:
        """The behaviour for attempt number ``attempt`` (1-based)."""
        n = len(self.steps)
        if attempt <= n:
            return self.steps[attempt - 1]
        return self.steps[(attempt - 1) % n] if self.cycle else self.steps[-1]


@dataclass(frozen=True, slots=True)
class Script:
    """A validated script.

    Attributes:
        models: The plan for each scripted model name.
        attempts_per: ``"model"`` or ``"model_key"``: what an attempt counter counts.
        seed: Seeds the draws of heavy-tailed delays (None: the simulator's seed).
        cache_ttl: Seconds a prompt prefix stays cached per deployment (None: no prompt caching).
    """

    models: Mapping[str, Plan] = field(default_factory=dict)
    attempts_per: str = "model"
    seed: int | None = None
    cache_ttl: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Script:
        """Validate a script given as a mapping (parsed TOML or JSON).

        Raises:
            ConfigError: The script is invalid; the message names the key path.
        """
        try:
            model = ScriptModel.model_validate(data)
        except ValidationError as exc:
            raise _config_error(exc) from exc
        return cls(
            models={
                name: Plan(
                    tuple(to_behaviour(s) for s in ms.steps),
                    cycle=ms.after_last == "cycle",
                    limits=ms.headroom.limits() if ms.headroom is not None else None,
                )
                for name, ms in model.models.items()
            },
            attempts_per=model.attempts_per,
            seed=model.seed,
            cache_ttl=model.cache.ttl if model.cache is not None else None,
        )

    @classmethod
    def from_text(cls, text: str) -> Script:
        """Validate a script given as TOML, or JSON when the text starts with ``{``.

        Raises:
            ConfigError: The text does not parse or the script is invalid.
        """
        stripped = text.lstrip()
        try:
            data: Any = orjson.loads(stripped) if stripped.startswith("{") else tomllib.loads(text)
        except (orjson.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"the script does not parse: {exc}", code=SCRIPT_ERROR_CODE) from exc
        if not isinstance(data, dict):
            raise ConfigError("the script must be a table (object)", code=SCRIPT_ERROR_CODE)
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> Script:
        """Read and validate a TOML (or ``.json``) script file.

        Raises:
            ConfigError: The file cannot be read or the script is invalid.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the script {path}: {exc}", code=SCRIPT_ERROR_CODE) from exc
        return cls.from_text(text)


ScriptSource = Script | Mapping[str, Any] | str | Path | None


def load_script(source: ScriptSource) -> Script:
    """A :class:`Script` from a script, a mapping, a file path or None (an empty script).

    Raises:
        ConfigError: The script is invalid.
    """
    if source is None:
        return Script()
    if isinstance(source, Script):
        return source
    if isinstance(source, str | Path):
        return Script.from_file(source)
    return Script.from_dict(source)


_STEP_ADAPTER: TypeAdapter[list[Step]] = TypeAdapter(list[Step])


def validate_steps(raw: Sequence[Mapping[str, Any]]) -> tuple[Behaviour, ...]:
    """Validate step tables (as the grammar produces them) into behaviours.

    Raises:
        ConfigError: A step is invalid.
    """
    try:
        steps = _STEP_ADAPTER.validate_python(list(raw))
    except ValidationError as exc:
        raise _config_error(exc, prefix="steps") from exc
    return tuple(to_behaviour(s) for s in steps)


def _format_loc(loc: tuple[int | str, ...], prefix: str = "") -> str:
    out = prefix
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(previous, int) and part in STEP_TAGS:
            pass  # the discriminator's tag, not a key the user wrote
        elif previous == "models":
            out += f'."{part}"' if out else f'"{part}"'
        else:
            out += f".{part}" if out else part
        previous = part
    return out


def _config_error(exc: ValidationError, prefix: str = "") -> ConfigError:
    problems = [
        (_format_loc(tuple(err["loc"]), prefix), err["msg"].removeprefix("Value error, ")) for err in exc.errors()
    ]
    first_path, message = problems[0]
    others = [f"{path}: {msg}" if path else msg for path, msg in problems[1:]]
    if others:
        message += "; also " + "; ".join(others)
    return ConfigError(message, path=first_path or None, code=SCRIPT_ERROR_CODE)


DEFAULT_PLAN = Plan((to_behaviour(OkStep(do="ok")),))
"""What a model that is neither scripted nor ``sim-`` gets: always ok."""


def parse_model_name(name: str) -> Plan:
    """The plan for a ``sim-`` model name (:mod:`turnout.sim.grammar`).

    Raises:
        ConfigError: The name does not follow the grammar or names invalid values.
    """
    try:
        raw = [parse_step_string(part) for part in name.removeprefix(PREFIX).split(THEN)]
        return Plan(validate_steps(raw))
    except GrammarError as exc:
        raise ConfigError(str(exc), path=name, code=SCRIPT_ERROR_CODE) from exc
    except ConfigError as exc:
        raise ConfigError(exc.message, path=f"{name}: {exc.path}", code=SCRIPT_ERROR_CODE) from exc
