"""Untrusted text on a terminal: shown, never obeyed.

Model names, outcomes and details in the ledger can come from a gateway client. Printed raw, an ANSI or OSC
escape would recolour the terminal or retitle its window, a newline would forge a table row, a bidi override
would reorder what the reader sees, and ``[bold]`` would be read as rich markup. :func:`shown` turns all of
that into visible, inert text.
"""

from __future__ import annotations

from rich.text import Text

#: How much of one untrusted value a table shows.
MAX_SHOWN_CHARS = 400

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    **{c: f"\\u{c:04x}" for c in _BIDI},
    **{ord(k): v for k, v in _NAMED.items()},
}


def shown(text: str, limit: int = MAX_SHOWN_CHARS) -> Text:
    """``text`` as rich ``Text`` (never read as markup), with control characters escaped, cut at ``limit``."""
    safe = text.translate(_ESCAPES)
    if len(safe) > limit:
        safe = safe[:limit] + "…"
    return Text(safe)
