"""A Chat Completions stream's text chunks taken by their template decode as the general path decodes them."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st
from provider_kit import decoded, make_adapter

from turnout.providers import HttpClient
from turnout.providers.openai_chat import ChatStreamDecoder
from turnout.types import StreamEvent, TextDelta

MODEL = "gpt-4o"


def _decoder() -> ChatStreamDecoder:
    decoder = make_adapter(HttpClient(), "openai", "http://127.0.0.1:9/v1").decoder(MODEL)
    assert isinstance(decoder, ChatStreamDecoder)
    return decoder


def _chunk(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1727346168,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
        **extra,
    }


def _dump(obj: Any, spaced: bool) -> bytes:
    """Compact as most providers write it, or with spaces as Python's ``json`` module does."""
    return json.dumps(obj).encode() if spaced else orjson.dumps(obj)


def _by_feed(wire: list[bytes], bounds: list[int]) -> Any:
    def decode(events: list[StreamEvent]) -> None:
        decoder = _decoder()
        for start, end in itertools.pairwise(bounds):
            events += decoder.feed(b"".join(wire[start:end]))
        events += decoder.finish()

    return decode


def _by_general_path(payloads: list[bytes]) -> Any:
    def decode(events: list[StreamEvent]) -> None:
        decoder = _decoder()
        for data in payloads:
            if decoder._event("", data, events):
                return

    return decode


#: Bytes put into a chunk's text slot as they stand: plain text, and what a JSON string may not hold raw or
#: holds only escaped (quotes, backslashes, control characters, invalid UTF-8, ``\\u`` escapes).
_SLOTS = st.one_of(
    st.text(max_size=6).map(lambda t: orjson.dumps(t)[1:-1]),
    st.sampled_from(
        [
            b"",
            b"a",
            b"w1 ",
            b"\xc3\xa9t\xc3\xa9",
            b'a"b',
            b"a\\",
            b"\\u003cb",
            b"\\n",
            b"x\x01",
            b"\t",
            b"\xff",
            b"\xc3",
        ]
    ),
    st.binary(max_size=4),
)


@settings(max_examples=400, deadline=None)
@given(
    slots=st.lists(_SLOTS, max_size=12),
    spaced=st.booleans(),
    varying=st.booleans(),
    padded=st.booleans(),
    pads=st.lists(_SLOTS, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=14), max_size=4),
)
@example(slots=[b"a", b"b", b"c", b"d"], spaced=False, varying=False, padded=False, pads=[], cuts=[])
@example(
    slots=[b"a", b"b", b'c"', b"d\x01", b"\xff", b"e"], spaced=True, varying=False, padded=False, pads=[], cuts=[3]
)
@example(slots=[b"a", b"b", b"c", b"d", b"e"], spaced=False, varying=True, padded=False, pads=[], cuts=[2])
@example(
    slots=[b"a", b"b", b"c", b"d"], spaced=False, varying=False, padded=True, pads=[b"x", b"", b'"', b"\\"], cuts=[]
)
def test_text_chunks_taken_by_template_decode_as_the_general_path_does(
    slots: list[bytes], spaced: bool, varying: bool, padded: bool, pads: list[bytes], cuts: list[int]
) -> None:
    """Chunks alike but for their text slot, holding any bytes, in any grouping of reads: ``_event``'s events.

    ``varying``: a field outside the text differs from chunk to chunk, so that no chunk is another's template.
    ``padded``: the chunks end with OpenAI's ``obfuscation`` padding, whose bytes are drawn as the text's are.
    """
    marker, pad_marker = "\x00slot\x00", "\x00pad\x00"
    payloads = []
    for i, slot in enumerate(slots):
        if padded:  # OpenAI's padding, last in the chunk, its bytes drawn as the text's are
            wire = _dump(_chunk(marker, obfuscation=pad_marker), spaced)
            wire = wire.replace(orjson.dumps(pad_marker)[1:-1], pads[i % len(pads)] if pads else b"")
        else:
            wire = _dump(_chunk(marker, **({"created": i % 3} if varying else {})), spaced)
        before, after = wire.split(orjson.dumps(marker)[1:-1])
        payloads.append(before + slot + after)
    payloads += [_dump({**_chunk(""), "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, spaced)]
    payloads.append(b"[DONE]")
    wire = [b"data: " + p + b"\n\n" for p in payloads]
    bounds = sorted({0, len(wire), *(min(c, len(wire)) for c in cuts)})
    assert decoded(_by_feed(wire, bounds)) == decoded(_by_general_path(payloads))


def test_a_stream_of_like_chunks_is_read_by_its_template() -> None:
    """The first plain chunk with text is the template; the others are read without being parsed."""
    decoder = _decoder()
    reads = [b"data: " + orjson.dumps(_chunk(f"w{i} ")) + b"\n\n" for i in range(5)]
    events = [e for read in reads for e in decoder.feed(read)]
    assert events == [TextDelta(text=f"w{i} ") for i in range(5)]
    assert decoder._template is not None
    prefix, suffix, lo, hi, padded = decoder._template
    assert prefix.endswith(b'"content":"') and suffix.startswith(b'"}') and (lo, hi) == (len(prefix), len(suffix))
    assert not padded and decoder._learning == 2  # learnt once


def test_a_stream_padded_by_openai_is_read_by_its_template() -> None:
    """OpenAI's ``obfuscation`` padding differs on every chunk: the template leaves it a slot of its own."""
    decoder = _decoder()
    reads = [b"data: " + orjson.dumps(_chunk(f"w{i} ", obfuscation="x" * (i % 7))) + b"\n\n" for i in range(6)]
    events = [e for read in reads for e in decoder.feed(read)]
    assert events == [TextDelta(text=f"w{i} ") for i in range(6)]
    assert decoder._template is not None and decoder._template[4] and decoder._learning == 2
    assert decoder._template[1].endswith(b'"obfuscation":"')


def test_chunks_that_differ_elsewhere_stop_the_learning() -> None:
    """A field that changes every chunk: each try fails to match the next chunk, and learning stops."""
    decoder = _decoder()
    for i in range(8):
        decoder.feed(b"data: " + orjson.dumps(_chunk("hi", created=i)) + b"\n\n")
    assert decoder._learning == 0
    padded_too = _decoder()  # the padding is not last: no padded template
    for i in range(8):
        padded_too.feed(b"data: " + orjson.dumps({"obfuscation": "x" * i, **_chunk("hi")}) + b"\n\n")
    assert padded_too._learning == 0


def test_a_slot_that_is_not_the_text_is_no_template() -> None:
    """The text's JSON form found twice, or only elsewhere (the text escaped): nothing is learnt."""
    twice = _decoder()
    twice.feed(b"data: " + orjson.dumps({**_chunk("chatcmpl-1")}) + b"\n\n")  # the id is the text too
    assert twice._template is None
    for text, escaped in [("zq", b"\\u007aq"), ("a", b"\\u0061"), ("b", b"\\u0062")]:
        # the content is written escaped; the same text stands plainly in another field
        elsewhere = _decoder()
        obj = orjson.dumps(_chunk(text, note=text)).replace(
            b'"content":"%s"' % text.encode(), b'"content":"' + escaped + b'"'
        )
        assert elsewhere.feed(b"data: " + obj + b"\n\n") == [TextDelta(text=text)]
        assert elsewhere._template is None
        other = obj.replace(b'"note":"%s"' % text.encode(), b'"note":"other"')
        assert elsewhere.feed(b"data: " + other + b"\n\n") == [TextDelta(text=text)]
