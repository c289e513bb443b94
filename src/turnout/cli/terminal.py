"""Untrusted text on a terminal: shown, never obeyed.

Model names, outcomes and details in the ledger can come from a gateway client. Printed raw, an ANSI or OSC
escape would recolour the terminal or retitle its window, a newline would forge a table row, a bidi override
would reorder what the reader sees, and ``[bold]`` would be read as rich markup. :func:`shown` turns all of
that into visible, inert text.

A table of such values fits the terminal (:class:`FittedTable`): no profile, model, outcome or cost is ever cut
to an ellipsis; a table too wide for the terminal prints stacked, one block per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from turnout.core.attribution import SKIPS, Attempt
from turnout.core.money import usd

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


def shown_lines(text: str, limit: int = MAX_SHOWN_CHARS) -> Text:
    """Like :func:`shown`, but a line break stays a line break: a multi-line message prints as lines.

    Every line after the first is indented by two spaces, so that no line of the message can pass for
    output of its own. Other control characters are escaped as :func:`shown` does.
    """
    lines = text[:limit].split("\n")
    out = Text("\n  ").join(shown(line.rstrip("\r"), limit) for line in lines)
    if len(text) > limit:
        out.append("…")
    return out


Cell = str | Text

#: A width no table reaches: what a table is measured in.
_UNBOUNDED = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One column of a :class:`FittedTable`.

    Attributes:
        name: Its header.
        right: Whether its values are right-justified (numbers).
        identifies: Whether its values say which row it is (profile, model, outcome, cost): they lead a
            stacked row.
        label: Its name before a value in the stacked layout (default: :attr:`name`).
    """

    name: str
    right: bool = False
    identifies: bool = False
    label: str | None = None


class FittedTable:
    """A table that fits the terminal: no value is ever cut.

    When every row fits the width on one line, it prints as a table; otherwise it prints stacked, one block
    per row: the identifying values on the first line, then the others, each after its label, indented.
    Values are never split inside the table and, in the stacked layout, only a value longer than a whole
    line is.

    Args:
        columns: The columns, in order.
        title: Printed above the table.
    """

    def __init__(self, columns: Sequence[Column], *, title: str | None = None) -> None:
        self.columns = tuple(columns)
        self.title = title
        self.rows: list[tuple[Cell, ...]] = []

    def add_row(self, *cells: Cell) -> None:
        """Append a row, one cell per column."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(cells)

    def table(self) -> Table:
        """The rows as one rich table, no cell wrapped or cut (wider than the terminal, it would be cut)."""
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, title=self.title)
        for column in self.columns:
            table.add_column(column.name, justify="right" if column.right else "left", no_wrap=True)
        for row in self.rows:
            table.add_row(*row)
        return table

    def stacked(self) -> Group:
        """The rows as blocks: the identifying values on one line, then each other value after its label."""
        parts: list[RenderableType] = []
        if self.title:
            parts.append(Text(self.title, style="bold"))
        parts.append(Text("  ".join(c.name for c in self.columns if c.identifies), style="bold"))
        for row in self.rows:
            pairs = list(zip(self.columns, row, strict=True))
            parts.append(Text("  ").join(_text(v) for c, v in pairs if c.identifies and _plain(v) not in ("", "-")))
            rest = [
                Text(f"{c.label or c.name} ", style="dim") + _text(v)
                for c, v in pairs
                if not c.identifies and _plain(v) not in ("", "-")
            ]
            if rest:
                parts.append(Padding(Text("  ").join(rest), (0, 0, 0, 3), expand=False))
        return Group(*parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self.table()
        # measured without the terminal's bound (a measurement is clamped to it): the width the table needs whole
        if Measurement.get(console, options.update_width(_UNBOUNDED), table).maximum <= options.max_width:
            yield table
        else:
            yield self.stacked()


def _text(value: Cell) -> Text:
    return value if isinstance(value, Text) else Text(value)


def _plain(value: Cell) -> str:
    return value.plain if isinstance(value, Text) else value


#: Colours of the outcomes in an attempts table (any other outcome: magenta).
_OUTCOME_STYLES = {"ok": "green", "cooldown_skip": "yellow", "breaker_skip": "yellow", "stream_interrupted": "red"}


def attempts_table(attempts: Sequence[Attempt]) -> FittedTable:
    """The attempts of one call, as ``turnout chat`` and the demo print them."""
    table = FittedTable(
        [
            Column(name="#", right=True, identifies=True),
            Column(name="profile", identifies=True),
            Column(name="model", identifies=True),
            Column(name="outcome", identifies=True),
            Column(name="status", right=True),
            Column(name="key"),
            Column(name="in/out tokens", right=True, label="tokens"),
            Column(name="cost", right=True, identifies=True),
            Column(name="ms", right=True),
            Column(name="retry hint", right=True, label="retry after"),
        ]
    )
    for i, a in enumerate(attempts, 1):
        table.add_row(
            str(i),
            shown(a.provider),
            shown(a.model),
            Text(a.outcome, style=_OUTCOME_STYLES.get(a.outcome, "magenta")),
            str(a.status) if a.status is not None else "-",
            a.key_id or "-",
            f"{a.usage.input_tokens}/{a.usage.output_tokens}" if a.usage else "-",
            usd(a.cost_usd),
            f"{a.duration_ms:.0f}" if a.outcome not in SKIPS else "-",
            f"{a.retry_after:.1f}s" if a.retry_after is not None else "-",
        )
    return table


def compact_attempts(attempts: Sequence[Attempt]) -> Text:
    """Each model with the outcomes of its attempts in order (a status where there was one)."""
    groups: list[list[str]] = []
    for a in attempts:
        said = str(a.status) if a.status is not None else a.outcome
        if groups and groups[-1][0] == a.model:
            groups[-1].append(said)
        else:
            groups.append([a.model, said])
    return shown(" → ".join(" ".join(g) for g in groups))
