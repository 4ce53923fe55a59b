"""What a request for a model id asks the grammar compiler is bounded (``limits.grammar``): each bound
refuses the request just past it with a 400 naming the limit and the field, admits the request at it,
and every ordinary structured request (an everyday schema, tens of tools, the cascade's own regexes)
passes untouched."""

import asyncio
import json
import time

import pytest
from pydantic import ValidationError

from serve_app.config import AppConfig, GrammarLimits, Limits
from serve_app.core.answer_forms import OPEN_TEXT, answer_form, repair_form
from serve_app.core.prompts import PromptKind
from serve_app.edge.errors import RequestError
from serve_app.edge.grammar_limits import (
    check_grammar_work,
    grammar_repetition,
    regex_repetition,
)
from serve_app.edge.passthrough_body import checked_body

G = GrammarLimits()


def schema_format(schema):
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}}


def refused(payload, limits=None) -> RequestError:
    with pytest.raises(RequestError) as error:
        check_grammar_work(payload, limits or Limits())
    return error.value


def admitted(payload, limits=None) -> None:
    check_grammar_work(payload, limits or Limits())


def enum(count, size=8):
    return {"type": "string", "enum": [f"{i:0{size}d}" for i in range(count)]}


def tool(index, parameters=None):
    return {
        "type": "function",
        "function": {
            "name": f"tool_{index}",
            "description": "does a thing",
            "parameters": parameters
            or {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "where"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                },
                "required": ["city"],
            },
        },
    }


def nested(levels):
    """A schema whose objects and arrays nest ``levels`` deep."""
    schema = {"type": "string"}
    for _ in range((levels - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def json_depth(value):
    if isinstance(value, dict):
        return 1 + max((json_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((json_depth(v) for v in value), default=0)
    return 0


def objects(count, properties):
    return {
        "anyOf": [
            {"type": "object", "properties": {f"p{o}_{p}": {"type": "integer"} for p in range(properties)}}
            for o in range(count)
        ]
    }


def everyday_schema():
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
    return {
        "type": "object",
        "$defs": {"address": address},
        "properties": {
            "invoice_id": {"type": "string", "maxLength": 40},
            "issued": {"type": "string", "format": "date"},
            "email": {"type": "string", "format": "email"},
            "currency": {"type": "string", "enum": ["EUR", "GBP", "USD"]},
            "seller": {"$ref": "#/$defs/address"},
            "buyer": {"$ref": "#/$defs/address"},
            "lines": {
                "type": "array",
                "minItems": 1,
                "maxItems": 50,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "maxLength": 32},
                        "description": {"type": "string", "maxLength": 200},
                        "quantity": {"type": "integer", "minimum": 1},
                        "price": {"type": "number"},
                        "tax": {"enum": ["standard", "reduced", "zero"]},
                    },
                    "required": ["sku", "quantity", "price"],
                },
            },
            "notes": {"anyOf": [{"type": "string", "maxLength": 500}, {"type": "null"}]},
            "status": {"const": "issued"},
        },
        "required": ["invoice_id", "issued", "currency", "seller", "lines"],
    }


def cascade_regexes():
    forms = [
        answer_form("yes_no"),
        answer_form("number"),
        answer_form("choice", ["A", "B", "C", "D"]),
        answer_form("choice", ["the red circle", "a blue square (large)", "green?"], options_named=True),
        repair_form("text"),
        OPEN_TEXT,
    ]
    return [form.regex(kind) for form in forms if form for kind in PromptKind]


# ---------------------------------------------------------------------------- what passes today


ORDINARY = {
    "an everyday schema": schema_format(everyday_schema()),
    "an everyday schema as structured_outputs.json": {"structured_outputs": {"json": everyday_schema()}},
    "an everyday schema as a JSON string": {"structured_outputs": {"json": json.dumps(everyday_schema())}},
    "json_object": {"response_format": {"type": "json_object"}},
    "text": {"response_format": {"type": "text"}},
    "40 tools, required": {"tools": [tool(t) for t in range(40)], "tool_choice": "required"},
    "40 tools, auto": {"tools": [tool(t) for t in range(40)]},
    "a named tool": {
        "tools": [tool(t) for t in range(10)],
        "tool_choice": {"type": "function", "function": {"name": "tool_3"}},
    },
    "a choice": {"structured_outputs": {"choice": ["positive", "negative", "neutral"]}},
    "a date regex": {"structured_outputs": {"regex": r"\d{4}-\d{2}-\d{2}"}},
    "an EBNF grammar": {"structured_outputs": {"grammar": 'root ::= "yes" | "no" | [0-9]{1,3}'}},
    "a Lark grammar": {"structured_outputs": {"grammar": 'start: "yes" | "no"\n%ignore " "'}},
    "a structural tag of tool calls": {
        "response_format": {
            "type": "structural_tag",
            "structures": [
                {
                    "begin": f"<function=tool_{t}>",
                    "schema": tool(t)["function"]["parameters"],
                    "end": "</function>",
                }
                for t in range(10)
            ],
            "triggers": ["<function="],
        }
    },
    "a structural tag as a string": {
        "structured_outputs": {
            "structural_tag": json.dumps(
                {
                    "type": "structural_tag",
                    "format": {
                        "type": "triggered_tags",
                        "triggers": ["<tool_call>"],
                        "tags": [
                            {
                                "begin": "<tool_call>",
                                "content": {"type": "json_schema", "json_schema": everyday_schema()},
                                "end": "</tool_call>",
                            }
                        ],
                    },
                }
            )
        }
    },
}


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_structured_requests_pass(name):
    admitted(ORDINARY[name])


def test_the_cascades_own_regexes_pass():
    for regex in cascade_regexes():
        admitted({"structured_outputs": {"regex": regex}})


def test_a_request_asking_no_grammar_passes():
    admitted(
        {"messages": [], "temperature": 0.2, "tools": [tool(t) for t in range(500)], "tool_choice": "none"}
    )
    admitted({"structured_outputs": "not an object", "response_format": ["nor"], "tools": "nor this"})


# ---------------------------------------------------------------------------- each bound


def just_past(limit: str):
    """(a payload at the default bound ``limit``, the same just past it, the param it names)."""
    g = G
    if limit == "max_schema_bytes":
        empty = len(json.dumps({"type": "string", "description": ""}, separators=(",", ":")))
        at = {"type": "string", "description": "x" * (g.max_schema_bytes - empty)}
        return schema_format(at), schema_format({**at, "description": at["description"] + "x"}), "schema"
    if limit == "max_schema_depth":
        return (
            schema_format(nested(g.max_schema_depth - 1)),
            schema_format(nested(g.max_schema_depth + 2)),
            "response_format.json_schema.schema",
        )
    if limit == "max_properties":
        return (
            schema_format(objects(1, g.max_properties)),
            schema_format(objects(1, g.max_properties + 1)),
            "response_format.json_schema.schema",
        )
    if limit == "max_enum_values":
        at = {
            "type": "object",
            "properties": {"a": enum(g.max_enum_values // 2), "b": enum(g.max_enum_values // 2)},
        }
        past = {**at, "properties": {**at["properties"], "c": {"const": 1}}}
        return schema_format(at), schema_format(past), "response_format.json_schema.schema"
    if limit == "max_enum_bytes":
        size = g.max_literal_bytes
        count = g.max_enum_bytes // size
        return (
            {"structured_outputs": {"choice": [f"{i:0{size}d}" for i in range(count)]}},
            {"structured_outputs": {"choice": [f"{i:0{size}d}" for i in range(count + 1)]}},
            "structured_outputs.choice",
        )
    if limit == "max_literal_bytes":
        return (
            schema_format({"const": "x" * g.max_literal_bytes}),
            schema_format({"const": "x" * (g.max_literal_bytes + 1)}),
            "response_format.json_schema.schema",
        )
    if limit == "max_regex_bytes":
        return (
            {"structured_outputs": {"regex": "a" * g.max_regex_bytes}},
            {"structured_outputs": {"regex": "a" * (g.max_regex_bytes + 1)}},
            "structured_outputs.regex",
        )
    if limit == "max_patterns":

        def emails(count):
            return schema_format(
                {"type": "object", "properties": {f"e{i}": {"format": "email"} for i in range(count)}}
            )

        return emails(g.max_patterns), emails(g.max_patterns + 1), "response_format.json_schema.schema"
    if limit == "max_repetition":
        return (
            schema_format({"type": "string", "maxLength": g.max_repetition}),
            schema_format({"type": "string", "maxLength": g.max_repetition + 1}),
            "response_format.json_schema.schema",
        )
    if limit == "max_grammar_bytes":

        def grammar(size):
            return {"structured_outputs": {"grammar": "root ::= " + '"' + "a" * (size - 11) + '"'}}

        return grammar(g.max_grammar_bytes), grammar(g.max_grammar_bytes + 1), "structured_outputs.grammar"
    if limit == "max_structural_tag_bytes":

        def tag(size):
            tag = {"type": "structural_tag", "structures": [], "triggers": ["<f>"], "x": ""}
            tag["x"] = "y" * (size - len(json.dumps(tag)))
            return {"structured_outputs": {"structural_tag": json.dumps(tag)}}

        return (
            tag(g.max_structural_tag_bytes),
            tag(g.max_structural_tag_bytes + 1),
            "structured_outputs.structural_tag",
        )
    if limit == "max_tools":
        return (
            {"tools": [tool(t) for t in range(g.max_tools)], "tool_choice": "required"},
            {"tools": [tool(t) for t in range(g.max_tools + 1)], "tool_choice": "required"},
            "tools",
        )
    if limit == "max_tool_schema_bytes":
        big = {"type": "object", "description": "d" * (g.max_schema_bytes - 64)}
        count = g.max_tool_schema_bytes // len(json.dumps(big, separators=(",", ":")))
        tools = [tool(t, dict(big)) for t in range(count + 1)]
        return (
            {"tools": tools[:count], "tool_choice": "auto"},
            {"tools": tools},
            f"tools.{count}.function.parameters",
        )
    raise AssertionError(limit)


LIMITS = sorted(GrammarLimits.model_fields)


@pytest.mark.parametrize("limit", LIMITS)
def test_each_bound_admits_the_request_at_it_and_refuses_the_one_past_it(limit):
    at, past, param = just_past(limit)
    admitted(at)
    error = refused(past)
    assert error.status == 400 and error.code == "grammar_too_complex"
    assert f"limits.grammar.{limit}" in error.message
    assert error.param is not None and error.param.endswith(param)


@pytest.mark.parametrize("limit", LIMITS)
def test_each_bound_follows_the_config(limit):
    """A bound set higher admits what the default refuses: the value is read from the config."""
    _, past, _ = just_past(limit)
    raised = {name: getattr(G, name) * 4 for name in LIMITS}
    admitted(past, Limits(grammar=GrammarLimits(**raised)))


def test_bounds_that_hold_for_the_whole_request_add_up_across_its_fields():
    half = G.max_enum_values // 2 + 1
    payload = {
        **schema_format(enum(half)),
        "structured_outputs": {"choice": [f"c{i}" for i in range(half)]},
    }
    assert "max_enum_values" in refused(payload).message
    repetition = G.max_repetition // 2 + 1
    payload = {
        **schema_format({"type": "string", "minLength": repetition}),
        "structured_outputs": {"regex": f"a{{{repetition + 1}}}"},
    }
    assert "max_repetition" in refused(payload).message


def test_every_place_a_schema_can_hide_is_walked():
    past = enum(G.max_enum_values + 1)
    hidden = {
        "properties": {"type": "object", "properties": {"enum": past}},  # a property named enum
        "$defs": {"type": "object", "$defs": {"a": past}, "$ref": "#/$defs/a"},
        "items in a list": {"type": "array", "prefixItems": [{"type": "integer"}, past]},
        "anyOf": {"anyOf": [{"type": "null"}, past]},
        "a tool": None,
        "a structural tag's schema": None,
        "structured_outputs.json": None,
    }
    for name, schema in hidden.items():
        if name == "a tool":
            payload = {"tools": [tool(0), tool(1, {"type": "object", "properties": {"a": past}})]}
        elif name == "a structural tag's schema":
            tag = {"type": "structural_tag", "structures": [{"begin": "<a>", "schema": past, "end": "</a>"}]}
            payload = {"response_format": {**tag, "triggers": ["<a>"]}}
        elif name == "structured_outputs.json":
            payload = {"structured_outputs": {"json": json.dumps(past)}}
        else:
            payload = schema_format(schema)
        assert "max_enum_values" in refused(payload).message, name


def test_patterns_and_counts_inside_schemas_are_bounded():
    regex = "a" * (G.max_regex_bytes + 1)
    for schema in (
        {"type": "string", "pattern": regex},
        {"type": "object", "patternProperties": {regex: {"type": "string"}}},
        {"type": "object", "propertyNames": {"pattern": regex}},
    ):
        assert "max_regex_bytes" in refused(schema_format(schema)).message
    counted = {"type": "string", "pattern": f"(ab){{{G.max_repetition // 2 + 2}}}"}
    assert "max_repetition" in refused(schema_format(counted)).message
    assert "max_repetition" in refused(schema_format({"type": "string", "minLength": 10**30})).message
    assert "max_repetition" in refused(schema_format({"type": "string", "maxLength": 1e300})).message


def test_grammar_counts_are_bounded():
    for grammar in (f'root ::= "a"{{{G.max_repetition + 1}}}', f'start: "a" ~ 1..{G.max_repetition + 1}'):
        error = refused({"structured_outputs": {"grammar": grammar}})
        assert "max_repetition" in error.message and error.param == "structured_outputs.grammar"


def test_a_schema_sent_as_a_string_gets_the_bodys_bounds_before_it_is_parsed():
    deep = "[" * 10_000 + "]" * 10_000
    error = refused({"structured_outputs": {"json": deep}})
    assert error.param == "structured_outputs.json"
    error = refused({"structured_outputs": {"structural_tag": '{"a":' * 5_000 + "1" + "}" * 5_000}})
    assert error.param == "structured_outputs.structural_tag"
    admitted({"structured_outputs": {"json": "not json"}})  # vLLM's validation names it


def test_tools_are_bounded_unless_tool_choice_is_none():
    many = [tool(t) for t in range(G.max_tools + 1)]
    for choice in ("required", "auto", {"type": "function", "function": {"name": "tool_0"}}, None):
        payload = {"tools": many} if choice is None else {"tools": many, "tool_choice": choice}
        assert refused(payload).param == "tools"
    admitted({"tools": many, "tool_choice": "none"})


def test_literal_text_of_structural_tags_and_tool_names_is_bounded():
    long = "<" + "x" * G.max_literal_bytes + ">"
    tag = {
        "type": "structural_tag",
        "structures": [{"begin": long, "schema": {}, "end": "</x>"}],
        "triggers": ["<"],
    }
    assert "max_literal_bytes" in refused({"response_format": tag}).message
    named = {"tools": [{"type": "function", "function": {"name": "f" * (G.max_literal_bytes + 1)}}]}
    assert refused(named).param == "tools.0.function.name"


def test_checked_body_refuses_before_anything_is_forwarded():
    async def fetch(url, param):
        raise AssertionError("fetched")

    _, past, _ = just_past("max_enum_values")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **past}
    with pytest.raises(RequestError) as error:
        asyncio.run(checked_body(body, Limits(), fetch))
    assert "limits.grammar.max_enum_values" in error.value.message
    at, _, _ = just_past("max_enum_values")
    asyncio.run(checked_body({**body, **at}, Limits(), fetch))


# ---------------------------------------------------------------------------- counting


@pytest.mark.parametrize(
    ("regex", "added"),
    [
        ("abc", 0),
        ("a{5}", 4),
        ("a{2,}", 1),
        ("a{0,10}", 9),
        ("(ab){3}", 4),  # the group's 2 positions, twice more
        ("((a{10}){10}){10}", 999),  # nested counts multiply
        ("[{5}]x", 0),  # braces in a class are characters
        (r"\{5}", 0),  # an escaped brace too
        ("a{x}", 0),  # a brace that is no count
        ("(a|bc){2}", 3),
        ("a{99999999999999999999}", 10_001),  # capped just past the limit
    ],
)
def test_regex_repetition(regex, added):
    assert regex_repetition(regex, 10_000) == added


def test_grammar_repetition_counts_every_count():
    assert grammar_repetition('root ::= "a"{3} b{0,5}\nb ::= "c"{2,}', 100) == 10
    assert grammar_repetition("start: a ~ 4\na: b ~ 2..6", 100) == 10
    assert grammar_repetition('root ::= "a"{123456789012}', 100) == 101


def test_the_walks_are_linear():
    """Worst shapes at the body's limits, checked in well under a second each."""
    started = time.monotonic()
    regex_repetition("(" * 500_000 + ")" * 500_000, 4096)
    regex_repetition("{" * 1_000_000, 4096)
    regex_repetition("[" * 1_000_000, 4096)
    grammar_repetition("{" + " " * 1_000_000 + "~" * 1_000_000, 4096)
    wide = {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}] * 50_000}}}
    check_grammar_work(schema_format(wide), Limits(grammar=GrammarLimits(max_schema_bytes=10**7)))
    assert time.monotonic() - started < 5


# ---------------------------------------------------------------------------- the config


def test_the_config_nests_grammar_limits_under_limits():
    assert Limits().grammar == GrammarLimits()
    models = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    config = AppConfig.model_validate(
        models | {"limits": {"grammar": {"max_enum_values": 50, "max_tools": 8}}}
    )
    assert config.limits.grammar.max_enum_values == 50 and config.limits.grammar.max_tools == 8
    assert config.limits.grammar.max_regex_bytes == G.max_regex_bytes


@pytest.mark.parametrize(
    "bad",
    [
        {"max_enum_values": 0},
        {"max_schema_bytes": 10},
        {"max_schema_depth": 1},
        {"max_tools": -1},
        {"max_repetition": "many"},
        {"max_regex_bytes": 1.5},
        {"max_tool_schema_bytes": None},
        {"max_enum": 10},  # unknown: a typo is an error
    ],
)
def test_bad_grammar_limits_are_refused(bad):
    with pytest.raises(ValidationError):
        GrammarLimits.model_validate(bad)
    with pytest.raises(ValidationError):
        Limits.model_validate({"grammar": bad})
