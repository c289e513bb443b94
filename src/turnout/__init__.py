"""Turnout: one reliable front over many LLM providers.

Route by profile or hint, retry with backoff, honour Retry-After, cool down rate-limited profiles,
rotate keys, fall back across models and profiles, guard streams against truncation, never replay a
request after the user has seen output, and record which backend served each answer and what every
attempt cost.
"""

from turnout.attribution import Attempt, FallbackNotice, RouteRef
from turnout.client import Client
from turnout.config import Config, ConfigWarning, load_config_dict, load_config_file, load_config_toml
from turnout.embeddings import EmbeddingLimits, Embeddings, EmbedReply, EmbedRequest
from turnout.errors import (
    AllProvidersFailed,
    ConfigError,
    ContextWindowExceeded,
    EmptyCompletion,
    ErrorClass,
    InvalidRequest,
    ProtocolError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    StreamingUnsupported,
    StreamInterruptedAfterOutput,
    StreamTruncated,
    TurnCancelled,
    TurnoutError,
    UnsupportedRequest,
)
from turnout.provider import Provider
from turnout.reliable import ReliableProvider
from turnout.reply import Reply
from turnout.router import Router
from turnout.types import (
    AnthropicTools,
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    GeminiTools,
    ImagePart,
    Message,
    OpenAITools,
    PromptGuidedTools,
    ProviderToolEvent,
    ReasoningDelta,
    ResponseFormat,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolsPayload,
    ToolSpec,
    Usage,
    UsageEvent,
)

__version__ = "0.1.0"

__all__ = [
    "AllProvidersFailed",
    "AnthropicTools",
    "Attempt",
    "Capabilities",
    "ChatRequest",
    "ChatResponse",
    "Client",
    "Config",
    "ConfigError",
    "ConfigWarning",
    "ContextWindowExceeded",
    "EmbedReply",
    "EmbedRequest",
    "EmbeddingLimits",
    "Embeddings",
    "EmptyCompletion",
    "ErrorClass",
    "FallbackNotice",
    "Final",
    "GeminiTools",
    "ImagePart",
    "InvalidRequest",
    "Message",
    "OpenAITools",
    "PromptGuidedTools",
    "ProtocolError",
    "Provider",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeout",
    "ProviderToolEvent",
    "ReasoningDelta",
    "RefusalError",
    "ReliableProvider",
    "Reply",
    "ResponseFormat",
    "RouteRef",
    "Router",
    "StreamEvent",
    "StreamInterruptedAfterOutput",
    "StreamTruncated",
    "StreamingUnsupported",
    "TextDelta",
    "TextPart",
    "ToolCall",
    "ToolCallEvent",
    "ToolSpec",
    "ToolsPayload",
    "TurnCancelled",
    "TurnoutError",
    "UnsupportedRequest",
    "Usage",
    "UsageEvent",
    "load_config_dict",
    "load_config_file",
    "load_config_toml",
]
