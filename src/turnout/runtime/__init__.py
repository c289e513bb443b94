"""The streaming runtime: turns with draft and event sinks, the replay boundary, sessions."""

from turnout.runtime.session import Session
from turnout.runtime.stream import ReplyStream
from turnout.runtime.turn import Sink, TurnState, call_sink, turn_outputs

__all__ = ["ReplyStream", "Session", "Sink", "TurnState", "call_sink", "turn_outputs"]
