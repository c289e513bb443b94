"""Hint routing: ``hint:<name>`` selects a reliability domain before its policy runs.

The router holds the default target (the active profile's reliable provider) and one per unique route target.
A recognised hint picks its target and the model to send; anything else stays on the default target.
An unknown hint logs a warning and keeps the literal ``hint:<name>`` as the requested model (a pinned
default serves its pin; an unpinned default forwards the literal). Routing never bypasses reliability:
every target is itself a :class:`~turnout.walk.reliable.ReliableProvider`.

The router only resolves: :meth:`Router.resolve` gives the :class:`Target`, and the caller (the client) runs the
call on the target's reliable provider. The router is not itself a :class:`~turnout.core.provider.Provider`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from turnout.walk.reliable import ReliableProvider

log = logging.getLogger("turnout.router")

HINT_PREFIX = "hint:"


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: its reliable provider, the model to send, and the hint that chose it (None: default)."""

    reliable: ReliableProvider
    model: str
    hint: str | None = None


class Router:
    """Dispatches ``hint:<name>`` models to their route targets, everything else to the default target.

    Args:
        default: The active profile's reliable provider.
        default_model: The model sent to the default target when the caller names none.
        routes: hint name → (reliable provider, route model). Routes sharing a target share one.
    """

    def __init__(
        self,
        default: ReliableProvider,
        default_model: str | None,
        routes: Mapping[str, tuple[ReliableProvider, str]] | None = None,
    ) -> None:
        self.default = default
        self.default_model = default_model
        self.routes = dict(routes or {})
        self._default_target = Target(default, default_model if default_model is not None else "", None)

    def resolve(self, model: str | None) -> Target:
        """The target for ``model``: a recognised hint's route, else the default target.

        The model sent to the default target is the caller's model, else :attr:`default_model`; a pinned
        entry replaces it with its pin anyway.
        """
        if model is not None and model.startswith(HINT_PREFIX):
            name = model[len(HINT_PREFIX) :]
            route = self.routes.get(name)
            if route is not None:
                return Target(route[0], route[1], name)
            log.warning("unknown route hint %r; staying on the default target", name)
            return Target(self.default, model, None)
        if model is None:
            return self._default_target
        return Target(self.default, model, None)

    def targets(self) -> list[ReliableProvider]:
        """Every distinct reliable provider: the default one first, then route targets in route order."""
        out = [self.default]
        for reliable, _ in self.routes.values():
            if all(reliable is not r for r in out):
                out.append(reliable)
        return out
