"""The access log: one JSON line per request on the ``turnout.gateway.access`` logger.

Under ``turnout serve`` (unless logging is configured otherwise) the logger's one handler is a
:class:`QueuedLines`, a :class:`logging.handlers.QueueHandler`: the event loop only puts each record on a
queue, and a :class:`logging.handlers.QueueListener` thread writes the lines to stderr, one write per line
(the lines of several worker processes never mix within a line). The gateway starts that thread when it
starts and stops it when it stops (:func:`start_writer`, :func:`stop_writer`): every line queued by then is
written first, waiting at most :data:`STOP_TIMEOUT_S` so that a stderr nobody reads cannot hold the shutdown.
A gateway in your own process logs ordinary records, handled as you configure.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sys
import threading
from logging.handlers import QueueHandler, QueueListener
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from yarl import URL

#: The logger of the access lines.
access_log = logging.getLogger("turnout.gateway.access")

#: The longest stopping the writer waits for the queued lines to be written, in seconds.
STOP_TIMEOUT_S = 2.0


class QueuedLines(QueueHandler):
    """Queues the access lines for :attr:`writer`, a thread that writes each to ``stream``.

    Args:
        stream: Where the lines go (default: stderr).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        super().__init__(lines)
        out = logging.StreamHandler(stream if stream is not None else sys.stderr)
        out.setFormatter(logging.Formatter("%(message)s"))
        self.writer = QueueListener(lines, out)

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        """The record as it is: an access line is a finished string without arguments, formatted by the writer."""
        return record


def logged_path(url: URL) -> str:
    """``url.path`` (percent-decoded), taken from the ``path_safe`` the router already decoded when it is the same.

    ``path_safe`` leaves only ``%2F`` and ``%25`` encoded, so without a ``%`` left in it, it is the path itself.
    """
    safe = url.path_safe
    return safe if "%" not in safe else url.path


def use_queue(stream: TextIO | None = None) -> QueuedLines:
    """Send the access lines to ``stream`` (default: stderr) through a :class:`QueuedLines` of their own.

    ``turnout serve`` calls it when it configures logging; the gateway then starts and stops the writer.
    """
    handler = QueuedLines(stream)
    access_log.addHandler(handler)
    access_log.propagate = False
    access_log.setLevel(logging.INFO)
    return handler


def start_writer() -> QueueListener | None:
    """Start the writer of the :class:`QueuedLines` on the access logger; None when there is none."""
    for handler in access_log.handlers:
        if isinstance(handler, QueuedLines):
            handler.writer.start()
            return handler.writer
    return None


async def stop_writer(writer: QueueListener, within: float = STOP_TIMEOUT_S) -> None:
    """Write the queued lines and stop ``writer``'s thread, waiting for it at most ``within`` seconds.

    The thread is a daemon: one stuck writing (a full pipe nobody reads) does not keep the process alive.
    """
    stopping = threading.Thread(target=writer.stop, name="turnout-access-log-stop", daemon=True)
    stopping.start()
    await asyncio.to_thread(stopping.join, within)
