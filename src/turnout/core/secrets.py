"""Secrets: literal values, ``"${ENV_NAME}"`` references and ``*_env`` keys, never printed.

A :class:`Secret` hides its value from ``repr``/``str``; code that needs the value asks for it with
:meth:`Secret.reveal`. Keys are identified everywhere else by :func:`key_id`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def key_id(value: str) -> str:
    """The first 8 hex digits of the SHA-256 of a key: how logs, the ledger and metrics name it."""
    return digest_key_id(hashlib.sha256(value.encode()).digest())


def digest_key_id(digest: bytes) -> str:
    """The :func:`key_id` of a key known only by its SHA-256 ``digest`` (a gateway's ``key_sha256``): the same id."""
    return digest.hex()[:8]


class Secret:
    """A credential whose value never shows in ``repr``, ``str``, logs or errors.

    Attributes:
        source: Where the value came from: ``"literal"`` or ``"$NAME"``.
        missing: True when the value refers to an environment variable that is not set.
    """

    __slots__ = ("_value", "missing", "source")

    def __init__(self, value: str | None, *, source: str = "literal") -> None:
        self._value = value or ""
        self.source = source
        self.missing = value is None

    @classmethod
    def parse(cls, raw: str, env: Mapping[str, str]) -> Secret:
        """Resolve ``"${NAME}"`` against ``env``; anything else is a literal."""
        m = _ENV_REF.match(raw.strip())
        if m:
            name = m.group(1)
            return cls(env.get(name), source=f"${name}")
        return cls(raw)

    @classmethod
    def from_env(cls, name: str, env: Mapping[str, str]) -> Secret:
        """The value of environment variable ``name`` (missing when unset)."""
        return cls(env.get(name), source=f"${name}")

    @property
    def unresolved(self) -> str | None:
        """Why a secret read from the environment holds no value, for an error; None when it has one.

        ``"$NAME is not set"`` or ``"$NAME is set but empty"`` (blank counts as empty); a literal that is
        empty gives ``"the value is empty"``.
        """
        if self:
            return None
        if self.missing:
            return f"{self.source} is not set"
        return f"{self.source} is set but empty" if self.source.startswith("$") else "the value is empty"

    def reveal(self) -> str:
        """The secret value itself. Do not log it."""
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value.strip())

    @property
    def id(self) -> str:
        """The key's id (SHA-256 prefix); ``"none"`` when empty."""
        return key_id(self._value) if self._value else "none"

    def __repr__(self) -> str:
        state = "missing" if self.missing else ("set" if self else "empty")
        return f"Secret({self.source}, {state})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def scrub(text: str, secrets: list[str] | tuple[str, ...]) -> str:
    """Replace every occurrence of each secret (and common key shapes) in ``text`` with ``[REDACTED]``.

    Args:
        text: The text to scrub.
        secrets: The configured secrets (shorter than 4 characters: ignored).
    """
    for s in secrets:
        if s and len(s) >= 4 and s in text:
            text = text.replace(s, "[REDACTED]")
    return _KEY_SHAPES.sub("[REDACTED]", text)


#: The key shapes :func:`scrub` redacts (``tk-``: a gateway client key that ``turnout key new`` made).
_KEY_SHAPES = re.compile(
    r"(?:sk-[A-Za-z0-9_\-*.]{6,}|tk-[A-Za-z0-9_\-]{16,}|xox[bp]-[A-Za-z0-9\-]{6,}|gh[pou]_[A-Za-z0-9]{6,}"
    r"|github_pat_[A-Za-z0-9_]{6,}|AIza[A-Za-z0-9_\-]{10,}|(?<=Bearer )[A-Za-z0-9_\-.=]{8,})",
    re.IGNORECASE,
)
