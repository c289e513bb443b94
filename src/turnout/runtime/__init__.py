"""The streaming runtime: turns with draft and event sinks, the replay boundary, cancellation, sessions."""

from turnout.runtime.session import Session
from turnout.runtime.stream import ReplyStream
from turnout.runtime.turn import Sink, Turn, call_sink, drive

__all__ = ["ReplyStream", "Session", "Sink", "Turn", "call_sink", "drive"]
