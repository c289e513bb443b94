"""Tool conversion: native wire shapes, prompt-guided instructions, and parsing of ``<tool_call>`` blocks."""

from __future__ import annotations

import orjson

from fakes import WEATHER
from turnout.core.tools import (
    anthropic_tools,
    gemini_tools,
    openai_tools,
    parse_prompt_guided_calls,
    prompt_guided_tools,
)
from turnout.core.types import ToolSpec

NOW = ToolSpec(name="now")  # no description, no parameters


def block(name: str, **arguments: object) -> str:
    return "<tool_call>\n" + orjson.dumps({"name": name, "arguments": arguments}).decode() + "\n</tool_call>"


# --- native shapes ------------------------------------------------------------------------------


def test_openai_tools_shape() -> None:
    """OpenAI gets function tools with the schema untouched."""
    assert openai_tools([WEATHER, NOW]).tools == (
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather for a city", "parameters": WEATHER.parameters},
        },
        {"type": "function", "function": {"name": "now", "description": "", "parameters": NOW.parameters}},
    )


def test_anthropic_tools_shape() -> None:
    """Anthropic gets name, description and the schema as input_schema."""
    assert anthropic_tools([WEATHER]).tools == (
        {"name": "get_weather", "description": "Weather for a city", "input_schema": WEATHER.parameters},
    )


def test_gemini_tools_trim_unsupported_keywords_at_every_depth() -> None:
    """Gemini's declarations lose the JSON Schema keywords it rejects, nested ones included."""
    spec = ToolSpec(
        name="book",
        parameters={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "when": {"type": "object", "properties": {"day": {"type": "string"}}, "additionalProperties": False},
                "who": {"anyOf": [{"type": "string", "$ref": "#/$defs/x"}, {"type": "null"}]},
            },
            "$defs": {"x": {"type": "string"}},
            "strict": True,
        },
    )
    (decl,) = gemini_tools([spec]).function_declarations
    assert decl == {
        "name": "book",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {
                "when": {"type": "object", "properties": {"day": {"type": "string"}}},
                "who": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
        },
    }


def test_gemini_tools_keep_parameters_whose_names_are_schema_keywords() -> None:
    """A parameter named like a dropped keyword (strict, $id, definitions) is a property, and is kept."""
    spec = ToolSpec(
        name="lint",
        parameters={
            "type": "object",
            "properties": {
                "strict": {"type": "boolean"},
                "definitions": {"type": "string", "additionalProperties": False},
                "path": {"type": "string"},
            },
            "required": ["path", "strict"],
        },
    )
    (decl,) = gemini_tools([spec]).function_declarations
    assert decl["parameters"]["properties"] == {
        "strict": {"type": "boolean"},
        "definitions": {"type": "string"},
        "path": {"type": "string"},
    }
    assert set(decl["parameters"]["required"]) <= set(decl["parameters"]["properties"])


def test_gemini_tools_without_properties_have_no_parameters() -> None:
    """A tool without properties is declared without parameters (Gemini rejects an empty object schema)."""
    assert gemini_tools([NOW]).function_declarations == ({"name": "now", "description": ""},)


# --- prompt-guided instructions -------------------------------------------------------------------


def test_prompt_guided_instructions_describe_the_protocol_and_each_tool() -> None:
    """The instructions give the exact block form, then each tool with its description and JSON schema."""
    text = prompt_guided_tools([WEATHER, NOW]).instructions
    assert text.startswith("## Tool Use Protocol\n")
    assert '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as a JSON object>}}\n</tool_call>' in text
    weather = text.index("### get_weather\nWeather for a city\nParameters (JSON Schema): ")
    now = text.index("### now\nParameters (JSON Schema): ")  # no blank description line
    assert weather < now
    schema_line = text[weather:].splitlines()[2]
    assert orjson.loads(schema_line.removeprefix("Parameters (JSON Schema): ")) == WEATHER.parameters
    assert text == text.rstrip()


def test_prompt_guided_instructions_round_trip_through_the_parser() -> None:
    """A block written in the form the instructions ask for parses into that call."""
    _, calls = parse_prompt_guided_calls(block("get_weather", city="Oslo"))
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("get_weather", {"city": "Oslo"})]


# --- parsing <tool_call> blocks --------------------------------------------------------------------


def test_text_without_blocks_is_returned_as_is() -> None:
    """No block: the very same text (unstripped) and no calls."""
    assert parse_prompt_guided_calls("  plain answer \n") == ("  plain answer \n", ())


def test_one_block_becomes_a_call_and_leaves_the_rest_of_the_text() -> None:
    """A valid block is removed from the text, which is trimmed; its arguments become compact JSON text."""
    text, calls = parse_prompt_guided_calls("Let me check.\n" + block("get_weather", city="Oslo") + "\n")
    assert text == "Let me check."
    (call,) = calls
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Oslo"}')
    assert call.id.startswith("call_") and len(call.id) == len("call_") + 24


def test_several_blocks_become_calls_in_order_with_distinct_ids() -> None:
    """Several blocks give several calls, in text order, each with its own id; the text between stays."""
    text, calls = parse_prompt_guided_calls(
        block("a", n=1) + " between " + '<tool_call>{"name": "b"}</tool_call>' + block("c", x=[1, 2])
    )
    assert text == "between"
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("a", {"n": 1}), ("b", {}), ("c", {"x": [1, 2]})]
    assert len({c.id for c in calls}) == 3


def test_arguments_given_as_json_text_are_kept_verbatim() -> None:
    """OpenAI-style arguments (a JSON string) pass through as the call's argument text."""
    _, calls = parse_prompt_guided_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert [(c.name, c.arguments) for c in calls] == [("f", '{"a": 1}')]


def test_malformed_blocks_stay_in_the_text_untouched() -> None:
    """Invalid JSON, a missing or non-string name, or a non-object body leaves the block as text."""
    for bad in (
        "<tool_call>{nope</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": 3}</tool_call>',
        '<tool_call>["get_weather", {}]</tool_call>',
        "<tool_call></tool_call>",
        ' <tool_call>{"name": "f"} ',  # never closed
    ):
        assert parse_prompt_guided_calls(bad) == (bad, ())


def test_a_malformed_block_next_to_valid_ones_stays_while_the_valid_ones_parse() -> None:
    """Only the valid blocks become calls; the malformed one stays exactly where it was."""
    text, calls = parse_prompt_guided_calls(block("a") + "<tool_call>{oops}</tool_call>" + block("b"))
    assert text == "<tool_call>{oops}</tool_call>"
    assert [c.name for c in calls] == ["a", "b"]
