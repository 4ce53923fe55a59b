"""The requests ``python -m loadtest.grammar_cost`` compiles: for each ``limits.grammar`` bound the
worst request found that it admits at the default limits, a few past it, and ordinary ones (an everyday
schema, tens of tools, the cascade's own regexes); and what vLLM 0.32 hands xgrammar for each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Any

from serve_app.config import Limits

# ---------------------------------------------------------------------------- the requests


@dataclass(frozen=True)
class Case:
    name: str
    limit: str  # the GrammarLimits field it probes, or "ordinary"
    fields: dict[str, Any]  # what the chat request carries besides model and messages
    admitted: bool = True  # at the default limits


def schema_format(schema: Any, name: str = "answer") -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}}


def shared_prefix_enum(count: int, size: int, fill: str = "x") -> dict[str, Any]:
    """``count`` strings of ``size`` bytes that differ only in their last 8 bytes."""
    return {"type": "string", "enum": [fill * (size - 8) + f"{i:08d}" for i in range(count)]}


def optional_objects(objects: int, properties: int) -> dict[str, Any]:
    """``objects`` object schemas of ``properties`` optional integer properties each, in an anyOf."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {f"{o:x}{p:03x}": {"type": "integer"} for p in range(properties)},
            }
            for o in range(objects)
        ]
    }


def nested(depth: int) -> dict[str, Any]:
    """Objects in objects: ``depth`` JSON levels in all."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range((depth - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def tool(index: int, properties: int) -> dict[str, Any]:
    """A function tool whose parameters are ``properties`` described strings, the first an enum."""
    params: dict[str, Any] = {
        f"arg_{p}": {"type": "string", "description": f"argument {p} of tool {index}"}
        for p in range(properties)
    }
    params["arg_0"]["enum"] = [f"opt{index}_{v}" for v in range(3)]
    return {
        "type": "function",
        "function": {
            "name": f"tool_{index:03d}",
            "description": f"tool number {index}",
            "parameters": {"type": "object", "properties": params, "required": sorted(params)[:2]},
        },
    }


def structural_tag(structures: int, properties: int) -> dict[str, Any]:
    """A legacy structural tag: ``structures`` tool-call tags, each with a schema of ``properties``."""
    return {
        "type": "structural_tag",
        "structures": [
            {
                "begin": f"<function={s:03d}>",
                "schema": {
                    "type": "object",
                    "properties": {f"p{p}": {"type": "integer"} for p in range(properties)},
                },
                "end": "</function>",
            }
            for s in range(structures)
        ],
        "triggers": ["<function="],
    }


def ordinary_schema() -> dict[str, Any]:
    """A few KB of an everyday schema: an invoice with nested objects, enums, a date, bounded strings."""
    address = {
        "type": "object",
        "properties": {
            "street": {"type": "string", "maxLength": 100},
            "city": {"type": "string", "maxLength": 60},
            "postcode": {"type": "string", "pattern": "^[0-9A-Z -]{3,10}$"},
            "country": {"type": "string", "enum": ["DE", "FR", "GB", "IT", "NL", "US"]},
        },
        "required": ["street", "city", "country"],
    }
    line = {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "maxLength": 32},
            "description": {"type": "string", "maxLength": 200},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
            "unit_price": {"type": "number", "minimum": 0},
            "tax": {"type": "string", "enum": ["standard", "reduced", "zero", "exempt"]},
        },
        "required": ["sku", "quantity", "unit_price"],
    }
    return {
        "type": "object",
        "$defs": {"address": address, "line": line},
        "properties": {
            "invoice_id": {"type": "string", "maxLength": 40},
            "issued": {"type": "string", "format": "date"},
            "currency": {"type": "string", "enum": ["EUR", "GBP", "USD"]},
            "seller": {"$ref": "#/$defs/address"},
            "buyer": {"$ref": "#/$defs/address"},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1, "maxItems": 50},
            "paid": {"type": "boolean"},
            "notes": {"anyOf": [{"type": "string", "maxLength": 500}, {"type": "null"}]},
        },
        "required": ["invoice_id", "issued", "currency", "seller", "lines"],
    }


def cascade_regexes() -> dict[str, str]:
    """The regexes the cascade itself sends (serve_app/core/answer_forms.py)."""
    from serve_app.core.answer_forms import OPEN_TEXT, answer_form
    from serve_app.core.prompts import PromptKind

    named = answer_form(
        "choice", ["red circle", "blue square", "green triangle", "yellow star"], options_named=True
    )
    yes_no = answer_form("yes_no")
    assert named is not None and yes_no is not None
    return {
        "yes/no after a reasoning": yes_no.regex(PromptKind.REASONING),
        "named options after a reasoning": named.regex(PromptKind.REASONING),
        "open text": OPEN_TEXT.regex(PromptKind.SIMPLE),
    }


def regex(pattern: str) -> dict[str, Any]:
    return {"structured_outputs": {"regex": pattern}}


def grammar(text: str) -> dict[str, Any]:
    return {"structured_outputs": {"grammar": text}}


def emails(count: int) -> dict[str, Any]:
    names = [f"e{i}" for i in range(count)]
    properties = {name: {"type": "string", "format": "email"} for name in names}
    return schema_format({"type": "object", "properties": properties, "required": names})


def words(count: int, width: int = 16) -> list[str]:
    """``count`` distinct strings of ``width`` bytes that differ from their first byte on."""
    return [f"{i:0{width}x}"[::-1] for i in range(count)]


def cases(limits: Limits) -> list[Case]:
    g = limits.grammar
    most = min(g.max_enum_values, g.max_enum_bytes // 16)  # values of 16 bytes
    per_value = min(g.max_literal_bytes, g.max_enum_bytes // 64)
    side = int(g.max_repetition**0.5)
    tag_props, tool_props = 8, 12
    tags = _fitting(lambda n: structural_tag(n, tag_props), g.max_structural_tag_bytes)
    tools = _fitting(lambda n: [tool(t, tool_props) for t in range(n)], g.max_tool_schema_bytes, g.max_tools)
    objects = _fitting(lambda n: optional_objects(n, g.max_properties), g.max_schema_bytes)
    found = [
        Case("enum: the most values", "max_enum_values", schema_format({"enum": words(most)})),
        Case("enum: 2x the values", "max_enum_values", schema_format({"enum": words(2 * most, 8)}), False),
        Case("choice: the most values", "max_enum_values", {"structured_outputs": {"choice": words(most)}}),
        # values sharing all but their last bytes: the compile grows with the shared prefix squared
        Case(
            "enum: values of the longest literal sharing a prefix, filling max_enum_bytes",
            "max_literal_bytes",
            schema_format(shared_prefix_enum(g.max_enum_bytes // per_value, per_value)),
        ),
        Case(
            "enum: 2 values of 16x max_literal_bytes sharing a prefix",
            "max_literal_bytes",
            schema_format(shared_prefix_enum(2, 16 * g.max_literal_bytes)),
            False,
        ),
        Case(
            "objects of the most optional properties, filling max_schema_bytes",
            "max_properties",
            schema_format(optional_objects(objects, g.max_properties)),
        ),
        Case(
            "one object of 4x max_properties optional properties",
            "max_properties",
            schema_format(optional_objects(1, 4 * g.max_properties)),
            False,
        ),
        Case("the deepest schema", "max_schema_depth", schema_format(nested(g.max_schema_depth - 1))),
        Case("a schema 2x as deep", "max_schema_depth", schema_format(nested(2 * g.max_schema_depth)), False),
        Case(
            "maxLength at max_repetition",
            "max_repetition",
            schema_format({"type": "string", "maxLength": g.max_repetition}),
        ),
        Case("regex .{0,max_repetition}", "max_repetition", regex(f".{{0,{g.max_repetition}}}")),
        Case(
            "regex (.{0,k}){0,k}, k*k at max_repetition",
            "max_repetition",
            regex(f"(.{{0,{side}}}){{0,{side}}}"),
        ),
        Case(
            "maxLength 4x max_repetition",
            "max_repetition",
            schema_format({"type": "string", "maxLength": 4 * g.max_repetition}),
            False,
        ),
        Case(
            "regex .{0,4x max_repetition}", "max_repetition", regex(f".{{0,{4 * g.max_repetition}}}"), False
        ),
        Case(
            "regex [^x] repeated to max_regex_bytes",
            "max_regex_bytes",
            regex("[^x]" * (g.max_regex_bytes // 4)),
        ),
        Case(
            "regex: an alternation of words to max_regex_bytes",
            "max_regex_bytes",
            regex("(" + "|".join(words(g.max_regex_bytes // 17 - 1)) + ")"),
        ),
        Case(
            "regex [^x] repeated to 4x max_regex_bytes",
            "max_regex_bytes",
            regex("[^x]" * g.max_regex_bytes),
            False,
        ),
        Case("email formats: max_patterns of them", "max_patterns", emails(g.max_patterns)),
        Case("email formats: 4x max_patterns", "max_patterns", emails(4 * g.max_patterns), False),
        Case(
            "EBNF: [^x] repeated to max_grammar_bytes",
            "max_grammar_bytes",
            grammar("root ::= " + "[^x]" * ((g.max_grammar_bytes - 16) // 4)),
        ),
        Case(
            "EBNF: an ambiguous repetition",
            "max_grammar_bytes",
            grammar('root ::= x*\nx ::= "a" | "aa" | "aaa" | [a-z] | [a-z][a-z]'),
        ),
        Case(
            "EBNF: nested counts at max_repetition",
            "max_grammar_bytes",
            grammar(f"root ::= a{{0,{side}}}\na ::= b{{0,{side // 2}}}\nb ::= [^x]"),
        ),
        Case(
            "EBNF: [^x] repeated to 4x max_grammar_bytes",
            "max_grammar_bytes",
            grammar("root ::= " + "[^x]" * g.max_grammar_bytes),
            False,
        ),
        Case(
            "structural tag: the most tags of small schemas",
            "max_structural_tag_bytes",
            {"response_format": structural_tag(tags, tag_props)},
        ),
        Case(
            "tools: the most, filling max_tool_schema_bytes, tool_choice required",
            "max_tools",
            {"tools": [tool(t, tool_props) for t in range(tools)], "tool_choice": "required"},
        ),
        Case(
            "tools: 4x max_tools, tool_choice required",
            "max_tools",
            {"tools": [tool(t, 2) for t in range(4 * g.max_tools)], "tool_choice": "required"},
            False,
        ),
        # what answers today must still
        Case("an everyday schema (an invoice)", "ordinary", schema_format(ordinary_schema())),
        Case(
            "20 tools, tool_choice required",
            "ordinary",
            {"tools": [tool(t, 4) for t in range(20)], "tool_choice": "required"},
        ),
        Case("json_object", "ordinary", {"response_format": {"type": "json_object"}}),
    ]
    return found + [
        Case(f"the cascade's regex: {name}", "ordinary", regex(text))
        for name, text in cascade_regexes().items()
    ]


def flood_job(limits: Limits) -> dict[str, Any]:
    """The slowest shape the defaults admit on the demo tokenizer, 8 distinct requests of it (none
    cached), beside the cascade's yes/no regex (cached): loadtest.grammar_flood's job."""
    g = limits.grammar
    per_value = min(g.max_literal_bytes, g.max_enum_bytes // 64)
    enum = partial(shared_prefix_enum, g.max_enum_bytes // per_value, per_value)
    costly = [compiler_input(schema_format(enum(fill))) for fill in "abcdefgh"]
    return {"cached": compiler_input(regex(cascade_regexes()["yes/no after a reasoning"])), "costly": costly}


def _fitting(build: Any, budget: int, most: int = 1 << 16) -> int:
    """The largest n (at most ``most``) whose ``build(n)`` is at most ``budget`` bytes of compact JSON."""
    n = 1
    while n < most and size(build(n + 1)) <= budget:
        n += 1
    return n


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


# ---------------------------------------------------------------------------- request -> compiler


def compiler_input(fields: dict[str, Any]) -> tuple[str, str]:
    """What vLLM 0.32's OpenAI server and engine hand xgrammar for a chat request carrying ``fields``:
    (the compile call, its argument)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tool_parsers.utils import get_json_schema_from_tools
    from vllm.v1.structured_output.request import get_structured_output_key
    from vllm.v1.structured_output.utils import choice_as_grammar, grammar_is_likely_lark

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    request = ChatCompletionRequest.model_validate(body)
    params = request.extract_structured_outputs()
    if request.tools and request.tool_choice not in (None, "none", "auto"):
        # what a tool parser's adjust_request sets (tool_parsers/abstract_tool_parser.py)
        schema = get_json_schema_from_tools(request.tool_choice, request.tools, request.parallel_tool_calls)
        params = StructuredOutputsParams(json=schema)  # type: ignore[call-arg]
    if params is None:
        raise ValueError("the request asks the compiler nothing")
    if params.choice is not None:  # validate_xgrammar_grammar rewrites a choice as a grammar
        params = StructuredOutputsParams(grammar=choice_as_grammar(params.choice))  # type: ignore[call-arg]
    kind, spec = get_structured_output_key(params)
    name = kind.name.lower()
    if name == "grammar":
        name = "lark" if grammar_is_likely_lark(spec) else "ebnf"
    return name, spec
