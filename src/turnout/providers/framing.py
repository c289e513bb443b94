r"""Incremental byte-level framing for Server-Sent Events and NDJSON.

Both parsers take bytes as they arrive (split anywhere, even inside a CRLF pair or a UTF-8 sequence) and
return complete events. They never re-scan or copy what they already consumed: only the unfinished last
line is carried over between reads. Lines and events are bounded; exceeding the bound raises
:class:`~turnout.core.errors.ResponseTooLarge` (a protocol error) so a hostile upstream cannot exhaust memory.

SSE follows the WHATWG rules: ``\\n``, ``\\r\\n`` and ``\\r`` end lines; a blank line ends an event;
several ``data:`` lines join with ``\\n``; lines starting with ``:`` are comments; one space after the
colon is dropped; an event with no data is not dispatched.
"""

from __future__ import annotations

from typing import TypeAlias

import orjson

from turnout.core.errors import ResponseTooLarge

DEFAULT_MAX_LINE = 8 * 1024 * 1024


#: One dispatched event: ``(name, data)``, its ``event:`` name ("" when absent) and its data as bytes. A plain
#: tuple: a parser builds one per event, so it must cost no more than that.
SSEEvent: TypeAlias = tuple[str, bytes]


class SSEParser:
    """Incremental SSE parser.

    Call :meth:`feed` with each chunk, then :meth:`finish` at end of body. Lines that are not SSE
    fields (for example a raw JSON error body a proxy appended) are kept in :attr:`stray` so an adapter
    can inspect them at EOF.
    """

    __slots__ = ("_cr", "_data", "_event", "_max", "_size", "_tail", "comments", "stray")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self._tail = b""
        self._cr = False  # the previous chunk ended with \r (maybe half of \r\n)
        self._event = ""
        self._data: list[bytes] = []  # the data lines of the event being read (non-empty: it has data)
        self._size = 0  # bytes of the event's data so far, a line break counted per data line
        self._max = max_line
        self.comments = 0
        self.stray: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume a chunk; return the events it completed."""
        if not chunk:  # an empty read must not forget a pending CR (the LF of its CRLF may come next)
            return []
        if self._cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._cr = False
        if b"\r" in chunk:
            self._cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        data = self._tail + chunk if self._tail else chunk
        lines = data.split(b"\n")
        self._tail = lines.pop()  # what follows the last line break: an unfinished line
        if len(data) > self._max and any(len(line) > self._max for line in lines):
            raise ResponseTooLarge(f"stream line longer than {self._max} bytes")  # also a line in one read
        if len(self._tail) > self._max:
            raise ResponseTooLarge(f"stream line longer than {self._max} bytes")
        out: list[SSEEvent] = []
        if lines:
            self._lines(lines, out)
        return out

    def _lines(self, lines: list[bytes], out: list[SSEEvent]) -> None:
        """Read complete lines (no line breaks) into ``out``: one loop, as each read has many lines."""
        data = self._data
        for line in lines:
            if not line:  # a blank line ends the event
                if data:
                    out.append((self._event, b"\n".join(data) if len(data) > 1 else data[0]))
                    data = self._data = []
                    self._size = 0
                self._event = ""
                continue
            if line.startswith(b"data:") or line == b"data":  # ``data`` alone: an empty data line
                value = line[6:] if line[5:6] == b" " else line[5:]
                data.append(value)
                self._size += len(value) + 1  # a running total: re-summing every line is quadratic
                if self._size > self._max + 1:
                    raise ResponseTooLarge(f"stream event larger than {self._max} bytes")
            elif line[0] == 58:  # ':' comment / keep-alive
                self.comments += 1
            else:
                self._field(line)

    def _field(self, line: bytes) -> None:
        """A line other than data or a comment: ``event:``, the ignored ``id:`` and ``retry:``, or stray."""
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field in (b"id", b"retry"):
            pass
        elif len(self.stray) < 64:
            self.stray.append(line)

    def finish(self) -> list[SSEEvent]:
        """End of body: dispatch an event whose lines were complete but lacked the closing blank line.

        An unfinished last line (no line break) is a cut in the middle of a line: it is dropped, and
        kept in :attr:`stray` for inspection.
        """
        out: list[SSEEvent] = []
        if self._tail:
            self.stray.append(self._tail)
            self._tail = b""
        self._lines([b""], out)
        return out


def unterminated_data_payloads(stray: list[bytes]) -> list[bytes]:
    """Payloads of ``data:`` lines the body ended on without a line break, when they are complete JSON.

    A proper prefix of a JSON object is never valid JSON, so a payload that parses was not cut: it is a
    whole event (some servers omit the last line break). Anything else was cut mid-line and is dropped.
    """
    out = []
    for line in stray:
        if line.startswith(b"data:"):
            payload = line[6:] if line[5:6] == b" " else line[5:]
            try:
                orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            out.append(payload)
    return out


class NDJSONParser:
    """Incremental newline-delimited JSON framing: returns complete, non-blank lines as bytes."""

    __slots__ = ("_max", "_tail")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self._tail = b""
        self._max = max_line

    def feed(self, chunk: bytes) -> list[bytes]:
        r"""Consume a chunk; return the complete lines it finished (``\\r`` before ``\\n`` removed)."""
        data = self._tail + chunk if self._tail else chunk
        out: list[bytes] = []
        pos = 0
        find = data.find
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            end = nl - 1 if nl > pos and data[nl - 1] == 13 else nl
            if end - pos > self._max:  # also when the whole line arrived in one read
                raise ResponseTooLarge(f"stream line longer than {self._max} bytes")
            if end > pos:
                line = data[pos:end]
                if not line.isspace():
                    out.append(line)
            pos = nl + 1
        self._tail = data[pos:] if pos < len(data) else b""
        over = len(self._tail) - self._max
        if over > 1 or (over == 1 and self._tail[-1] != 13):  # a CR may be the first half of the CRLF
            raise ResponseTooLarge(f"stream line longer than {self._max} bytes")
        return out

    def finish(self) -> bytes:
        """End of body: the unterminated last line ("" when the body ended with a line break)."""
        tail, self._tail = self._tail.strip(), b""
        return tail
