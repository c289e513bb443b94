"""Turnout: one reliable front over many LLM providers.

Route by profile or hint, retry with backoff, honour Retry-After, cool down rate-limited profiles,
rotate keys, fall back across models and profiles, guard streams against truncation, never replay a
request after the user has seen output, and record which backend served each answer and what every
attempt cost.
"""

from turnout.client import Client
from turnout.config import Config, ConfigWarning, load_config_dict, load_config_file, load_config_toml
from turnout.core.attribution import Attempt, FallbackNotice, RouteRef
from turnout.core.embeddings import EmbeddingLimits, Embeddings, EmbedReply, EmbedRequest
from turnout.core.environment import Environment
from turnout.core.errors import (
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
from turnout.core.provider import Provider
from turnout.core.types import (
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
from turnout.reply import Reply
from turnout.walk.reliable import ReliableProvider
from turnout.walk.router import Router

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
    "Environment",
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
