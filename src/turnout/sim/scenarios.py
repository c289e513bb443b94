"""Which behaviour a request gets: the script, the model-name grammar and the attempt counters.

Lookup order for a model name: the script's ``models`` table, then the ``sim-`` grammar, then "ok".
Attempts are counted per model (or per model and API key id when the script says
``attempts_per = "model_key"``), for every model, scripted or not. A heavy-tailed delay is drawn from a
generator seeded by the script's ``seed``, else the simulator's, and seeded again on every restart, so a
seeded run draws the same delays each time.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from turnout.core.errors import ConfigError
from turnout.sim.behaviour import Behaviour, ErrorKind, ErrorSpec, Kind
from turnout.sim.caching import PromptCache
from turnout.sim.grammar import PREFIX
from turnout.sim.headroom import Limits, RateWindows
from turnout.sim.script import DEFAULT_PLAN, Plan, Script, parse_model_name

_MAX_CACHED_NAMES = 4096


class Scenarios:
    """The script in force, the attempt counters and the start of timed scenarios (flapping)."""

    def __init__(self, script: Script, clock: Callable[[], float], seed: int | None = None) -> None:
        self._clock = clock
        self._script = script
        self._seed = seed
        self._counts: dict[object, int] = {}
        self._names: dict[str, Plan] = {}
        self._draws = random.Random(self._seed_now())
        self.epoch = clock()
        #: The rate-limit windows of scripted models with budgets (counted like attempts).
        self.windows = RateWindows(clock)
        #: The prompt prefixes each deployment answered (with the script's ``[cache] ttl``).
        self.prompts = PromptCache(clock)

    @property
    def script(self) -> Script:
        """The script in force."""
        return self._script

    def restart(self) -> None:
        """Zero the attempt counters, refill every budget, restart timed scenarios and seed the delay draws again."""
        self._counts.clear()
        self.windows.clear()
        self.prompts.clear()
        self._draws.seed(self._seed_now())
        self.epoch = self._clock()

    def _seed_now(self) -> int | None:
        return self._script.seed if self._script.seed is not None else self._seed

    def delay(self, behaviour: Behaviour) -> float:
        """The delay of one attempt: the step's ``delay``, or its ``tail`` with probability ``tail_p``."""
        if behaviour.tail_p and self._draws.random() < behaviour.tail_p:
            return behaviour.tail
        return behaviour.delay

    def replace(self, script: Script) -> None:
        """Put ``script`` in force; counters and timed scenarios restart."""
        self._script = script
        self._names.clear()
        self.restart()

    def elapsed(self) -> float:
        """Seconds since start, reset or the last script change."""
        return self._clock() - self.epoch

    def counter(self, model: str, key_id: str | None) -> object:
        """What an attempt on ``model`` with ``key_id`` is counted under (``attempts_per``)."""
        return model if self._script.attempts_per == "model" else (model, key_id)

    def limits(self, model: str) -> Limits | None:
        """The rate-limit budgets the script gives ``model`` (None: none)."""
        scripted = self._script.models.get(model)
        return scripted.limits if scripted is not None else None

    def select(self, model: str, key_id: str | None) -> tuple[int, Behaviour]:
        """Count an attempt on ``model`` and return its number and behaviour."""
        key = self.counter(model, key_id)
        attempt = self._counts.get(key, 0) + 1
        self._counts[key] = attempt
        return attempt, self.plan(model).pick(attempt)

    def plan(self, model: str) -> Plan:
        """The plan for ``model`` (cached for grammar names)."""
        scripted = self._script.models.get(model)
        if scripted is not None:
            return scripted
        if not model.startswith(PREFIX):
            return DEFAULT_PLAN
        plan = self._names.get(model)
        if plan is None:
            try:
                plan = parse_model_name(model)
            except ConfigError as exc:
                invalid = Behaviour(
                    kind=Kind.INVALID,
                    error=ErrorSpec(kind=ErrorKind.BAD_REQUEST, status=400, message=f"turnout-sim: {exc}"),
                )
                plan = Plan((invalid,))
            if len(self._names) >= _MAX_CACHED_NAMES:
                self._names.clear()
            self._names[model] = plan
        return plan
