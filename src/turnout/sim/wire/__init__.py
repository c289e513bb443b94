"""One encoder per wire protocol, seen from the server side."""

from turnout.sim.wire.anthropic import AnthropicMessages
from turnout.sim.wire.azure import AzureChat
from turnout.sim.wire.base import Codec, ErrorReply, Parsed, StreamEncoder
from turnout.sim.wire.bedrock import BedrockConverse
from turnout.sim.wire.gemini import Gemini
from turnout.sim.wire.ollama import Ollama
from turnout.sim.wire.openai_chat import OpenAIChat
from turnout.sim.wire.openai_responses import OpenAIResponses
from turnout.sim.wire.vertex import VertexAnthropic, VertexGemini

__all__ = [
    "AnthropicMessages",
    "AzureChat",
    "BedrockConverse",
    "Codec",
    "ErrorReply",
    "Gemini",
    "Ollama",
    "OpenAIChat",
    "OpenAIResponses",
    "Parsed",
    "StreamEncoder",
    "VertexAnthropic",
    "VertexGemini",
]
