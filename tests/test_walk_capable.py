"""The walk asks an entry whether it can take a request only when the request could need it: held to asking always."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import E, Scripted, walk
from turnout.types import Capabilities, ChatRequest, NativeRequest, ResponseFormat
from turnout.walk import Admission

_caps = st.builds(
    Capabilities,
    vision=st.booleans(),
    streaming=st.booleans(),
    streaming_tool_events=st.booleans(),
    structured_output=st.booleans(),
    protocol=st.sampled_from(["", "openai-chat", "anthropic"]),
)
_native = st.one_of(
    st.none(),
    st.builds(
        NativeRequest,
        protocol=st.sampled_from(["openai-chat", "anthropic", "openai-responses"]),
        body=st.just({"model": "m"}),
        only=st.sampled_from([(), ("messages[0].content[0] (document)",)]),
    ),
)
_format = st.one_of(st.none(), st.just(ResponseFormat(kind="json_schema", name="answer", schema={"type": "object"})))


@settings(max_examples=300, deadline=None)
@given(caps=_caps, native=_native, response_format=_format, images=st.booleans(), stream=st.booleans())
def test_an_entry_is_skipped_exactly_when_it_cannot_take_the_request(
    caps: Capabilities, native: NativeRequest | None, response_format: ResponseFormat | None, images: bool, stream: bool
) -> None:
    """Whatever the entry can do and the request asks (native body, schema, images, stream): skipped iff incapable."""
    route = walk(E("openai.a", "m", [Scripted("ok", caps=caps)]))
    request = ChatRequest.of("hello", response_format=response_format, native=native)
    w = route.new_walk(None, "m")
    entry = route.entries[0]
    skipped = w.admits(0, entry, "m", request, images, stream=stream) is Admission.SKIP
    assert skipped == (not w.capable(entry, "m", request, images, stream=stream))
