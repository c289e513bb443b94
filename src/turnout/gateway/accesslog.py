"""The access log: one JSON line per request on the ``turnout.gateway.access`` logger.

A line costs the gateway about as much as the rest of its own work on a request when it goes through a log
record and a write per line. So under ``turnout serve`` (unless logging is configured otherwise) the
logger's one handler is :class:`BatchedLines`, and the gateway hands it each line directly, without a log
record: lines are buffered and written to stderr in whole lines, up to 4 KiB per write (the size a pipe
writes at once, so the lines of several worker processes never mix within a line), at least every 0.2 s
and when the gateway stops. A gateway in your own process logs ordinary records, handled as you configure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yarl import URL

#: The logger of the access lines.
access_log = logging.getLogger("turnout.gateway.access")

#: The longest single write: a pipe writes this much at once, so lines of several processes never interleave.
WRITE_BYTES = 4096
#: The longest a line waits in the buffer, in seconds.
FLUSH_EVERY_S = 0.2


class BatchedLines(logging.Handler):
    """Writes lines to a file descriptor in batches (see the module docstring).

    Args:
        fd: Where to write (default: stderr).
    """

    def __init__(self, fd: int = 2) -> None:
        super().__init__()
        self.fd = fd
        self._lines: list[bytes] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None

    def write(self, line: bytes) -> None:
        """Queue one line (without its newline)."""
        size = self._size + len(line) + 1
        if size > WRITE_BYTES and self._lines:  # the queued lines fill one write: send them first
            self.flush()
            size = len(line) + 1
        self._lines.append(line)
        self._size = size
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop: nothing would flush later, so write now
                self.flush()
                return
            self._timer = loop.call_later(FLUSH_EVERY_S, self.flush)

    def emit(self, record: logging.LogRecord) -> None:
        """A log record from elsewhere: its formatted message as a line."""
        try:
            self.write(self.format(record).encode("utf-8", "backslashreplace"))
        except Exception:  # logging must never raise into the caller
            self.handleError(record)

    def flush(self) -> None:
        """Write every queued line now: one write, of at most :data:`WRITE_BYTES` unless one line is longer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._lines:
            return
        lines, self._lines, self._size = self._lines, [], 0
        lines.append(b"")  # the last newline
        with contextlib.suppress(OSError):  # stderr closed or full: the lines are lost, serving goes on
            _write_all(self.fd, b"\n".join(lines))

    def close(self) -> None:
        """Write what is queued, then close."""
        self.flush()
        super().close()


def logged_path(url: URL) -> str:
    """``url.path`` (percent-decoded), taken from the ``path_safe`` the router already decoded when it is the same.

    ``path_safe`` leaves only ``%2F`` and ``%25`` encoded, so without a ``%`` left in it, it is the path itself.
    """
    safe = url.path_safe
    return safe if "%" not in safe else url.path


#: Below this, every integer and every half between two is a double.
_EXACT = 2.0**52


def round_ms(x: float) -> float:
    """``round(x, 3)`` exactly, at a fraction of its cost (it converts to decimal digits and back).

    ``p = x * 1000`` is the exact product rounded to the nearest double, and below :data:`_EXACT` every half
    between two integers is a double; so ``p`` is never on the other side of a half than the exact product,
    and its nearest integer is the exact product's unless ``p`` is a half itself. That integer divided by 1000
    is the double nearest the rounded decimal: what ``round`` returns. For a half (a tie, or a product just
    beside one), zero, a negative or a huge value, it is ``round`` itself.
    """
    p = x * 1000.0
    if 0.0 < p < _EXACT:
        whole = round(p)
        if abs(p - whole) != 0.5:
            return whole / 1000.0
    return round(x, 3)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def use_batched_lines(fd: int = 2) -> BatchedLines:
    """Send the access lines to ``fd`` through a :class:`BatchedLines` of their own (``turnout serve``)."""
    handler = BatchedLines(fd)
    access_log.addHandler(handler)
    access_log.propagate = False
    access_log.setLevel(logging.INFO)
    return handler


def direct_sink() -> BatchedLines | None:
    """The handler to give lines to directly: set when a :class:`BatchedLines` alone takes the access lines."""
    handlers = access_log.handlers
    if (
        len(handlers) == 1
        and isinstance(handlers[0], BatchedLines)
        and not access_log.propagate
        and access_log.isEnabledFor(logging.INFO)
    ):
        return handlers[0]
    return None
