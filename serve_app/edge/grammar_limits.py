"""What a request for a model id asks the engines' grammar compiler, bounded before it is forwarded.

vLLM compiles a grammar for ``structured_outputs`` (json, regex, choice, grammar, structural_tag),
``response_format`` (json_schema, structural_tag) and ``tools`` (a JSON schema of every tool under
``tool_choice: required``, of the named one under a named choice, and a structural tag of them all
under ``auto`` when the engine has a tool parser that builds one). xgrammar's compile time grows with
what the request spells out, and faster than linearly in a few places: many enum values, values that
share a long prefix, many optional properties in one object, and every position a string's length bound
or a regex's ``{m,n}`` count unrolls. ``check_grammar_work`` reads what the compiler would get and
refuses, with a 400 naming the limit (``limits.grammar``) and the field, a request past one.

Every walk visits each value once with an explicit stack (linear in the request; the body's nesting is
already bounded by ``limits.max_json_depth``); a schema or structural tag sent as a JSON string gets the
body's bounds before it is parsed. Shapes vLLM refuses anyway (a regex that is not a string, a schema
that is not an object) are left to its own validation.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from typing import Any

from ..config import GrammarLimits, Limits
from .body import check_structure, outside_strings
from .errors import RequestError

CODE = "grammar_too_complex"
# Schema keywords whose value maps names to subschemas (a name there is no keyword).
NAMED_SUBSCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
LENGTH_BOUNDS = ("minLength", "maxLength")
# A structural tag's keys that hold a JSON schema, a regex, a grammar, or literal text.
TAG_SCHEMAS = ("json_schema", "schema")
TAG_LITERALS = ("begin", "end", "value", "separator", "triggers")
# {m}, {m,} and {m,n} in a grammar (EBNF, and Lark's regex terminals); Lark's own ``~ m`` and ``~ m..n``.
_BRACE_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
_LARK_COUNT = re.compile(r"~\s*(\d+)(?:\s*\.\.\s*(\d+))?")
_MAX_DIGITS = 9  # a count with more digits is past any limit: never converted


def check_grammar_work(payload: dict[str, Any], limits: Limits) -> None:
    """A 400 naming the first ``limits.grammar`` bound that what ``payload`` asks the grammar compiler
    passes; nothing for a request that asks it nothing."""
    budget = _Budget(limits.grammar)
    structured = payload.get("structured_outputs")
    if isinstance(structured, dict):
        _check_structured_outputs(structured, budget, limits)
    response_format = payload.get("response_format")
    if isinstance(response_format, dict):
        _check_response_format(response_format, budget, limits)
    tools = payload.get("tools")
    if isinstance(tools, list) and payload.get("tool_choice", "auto") != "none":
        _check_tools(tools, budget)


class _Budget:
    """What the request has asked for so far, against the limits that hold for it in all."""

    def __init__(self, limits: GrammarLimits):
        self.limits = limits
        self.values = self.value_bytes = self.patterns = self.repetition = 0

    def refuse(self, what: str, limit: str, param: str) -> RequestError:
        bound = getattr(self.limits, limit)
        return RequestError(
            f"{what}; this server takes at most {bound} (limits.grammar.{limit})", param=param, code=CODE
        )

    def literal(self, value: Any, param: str) -> None:
        """One enum, const or choice value, or a structural tag's literal text."""
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else _json_bytes(value)
        if size > self.limits.max_literal_bytes:
            raise self.refuse(f"a value there has {size} bytes", "max_literal_bytes", param)
        self.values += 1
        self.value_bytes += size
        if self.values > self.limits.max_enum_values:
            raise self.refuse(
                f"the request has more than {self.limits.max_enum_values} enum, const and choice values",
                "max_enum_values",
                param,
            )
        if self.value_bytes > self.limits.max_enum_bytes:
            raise self.refuse(
                f"its enum, const and choice values have more than {self.limits.max_enum_bytes} bytes in all",
                "max_enum_bytes",
                param,
            )

    def pattern(self, param: str) -> None:
        self.patterns += 1
        if self.patterns > self.limits.max_patterns:
            raise self.refuse(
                f"its schemas have more than {self.limits.max_patterns} patterns and string formats",
                "max_patterns",
                param,
            )

    def repeat(self, count: int, param: str) -> None:
        self.repetition += count
        if self.repetition > self.limits.max_repetition:
            raise self.refuse(
                "its length bounds and {m,n} counts unroll to more than "
                f"{self.limits.max_repetition} positions in all",
                "max_repetition",
                param,
            )

    def regex(self, pattern: str, param: str) -> None:
        size = len(pattern.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_regex_bytes:
            raise self.refuse(f"the regex has {size} bytes", "max_regex_bytes", param)
        self.repeat(regex_repetition(pattern, self.limits.max_repetition), param)

    def grammar(self, grammar: str, param: str) -> None:
        size = len(grammar.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_grammar_bytes:
            raise self.refuse(f"the grammar has {size} bytes", "max_grammar_bytes", param)
        self.repeat(grammar_repetition(grammar, self.limits.max_repetition), param)


# ---------------------------------------------------------------------------- the request's fields


def _check_structured_outputs(structured: dict[str, Any], budget: _Budget, limits: Limits) -> None:
    schema = structured.get("json")
    if isinstance(schema, str):
        schema = _parsed(schema, "structured_outputs.json", limits)
    if isinstance(schema, dict | bool):
        check_schema(schema, budget, "structured_outputs.json")
    regex = structured.get("regex")
    if isinstance(regex, str):
        budget.regex(regex, "structured_outputs.regex")
    whitespace = structured.get("whitespace_pattern")
    if isinstance(whitespace, str):
        budget.regex(whitespace, "structured_outputs.whitespace_pattern")
    choice = structured.get("choice")
    if isinstance(choice, list):
        for value in choice:
            budget.literal(value, "structured_outputs.choice")
    grammar = structured.get("grammar")
    if isinstance(grammar, str):
        budget.grammar(grammar, "structured_outputs.grammar")
    tag = structured.get("structural_tag")
    if isinstance(tag, str):
        param = "structured_outputs.structural_tag"
        size = len(tag.encode("utf-8", "surrogatepass"))
        if size > budget.limits.max_structural_tag_bytes:
            raise budget.refuse(f"the structural tag has {size} bytes", "max_structural_tag_bytes", param)
        parsed = _parsed(tag, param, limits)
        if isinstance(parsed, dict):
            check_structural_tag(parsed, budget, param)


def _check_response_format(response_format: dict[str, Any], budget: _Budget, limits: Limits) -> None:
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if isinstance(schema, dict | bool):
            check_schema(schema, budget, "response_format.json_schema.schema")
    elif kind == "structural_tag":
        size = _json_bytes(response_format)
        if size > budget.limits.max_structural_tag_bytes:
            raise budget.refuse(
                f"the structural tag has {size} bytes", "max_structural_tag_bytes", "response_format"
            )
        check_structural_tag(response_format, budget, "response_format")


def _check_tools(tools: list[Any], budget: _Budget) -> None:
    limits = budget.limits
    if len(tools) > limits.max_tools:
        raise budget.refuse(f"the request has {len(tools)} tools", "max_tools", "tools")
    total = 0
    for t, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        if isinstance(name, str):  # the tool's name is a literal of the grammar
            budget.literal(name, f"tools.{t}.function.name")
        parameters = function.get("parameters")
        if isinstance(parameters, dict | bool):
            param = f"tools.{t}.function.parameters"
            total += check_schema(parameters, budget, param)
            if total > limits.max_tool_schema_bytes:
                raise budget.refuse(
                    f"the tools' parameter schemas have {total} bytes or more in all",
                    "max_tool_schema_bytes",
                    param,
                )


def _parsed(text: str, param: str, limits: Limits) -> Any:
    """``text`` as JSON, within the body's bounds; None when it is no JSON (vLLM's validation names it)."""
    try:
        check_structure(outside_strings(text.encode("utf-8", "surrogatepass")), limits)
    except RequestError as error:
        raise RequestError(error.message, param=param, code=error.code) from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _json_bytes(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (as vLLM hands a schema to the compiler, give or take spaces)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


# ---------------------------------------------------------------------------- JSON schemas


def check_schema(schema: dict[str, Any] | bool, budget: _Budget, param: str) -> int:
    """A 400 when ``schema`` passes a schema bound, or adds past a request-wide one to ``budget``;
    else its bytes. One pass over its values, with an explicit stack."""
    limits = budget.limits
    size = _json_bytes(schema)
    if size > limits.max_schema_bytes:
        raise budget.refuse(f"the JSON schema has {size} bytes", "max_schema_bytes", param)
    # (value, depth, whether value maps names to subschemas)
    stack: list[tuple[Any, int, bool]] = [(schema, 1, False)]
    while stack:
        node, depth, named = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > limits.max_schema_depth:
            raise budget.refuse(
                f"the JSON schema nests more than {limits.max_schema_depth} levels (objects and arrays)",
                "max_schema_depth",
                param,
            )
        if isinstance(node, list):
            stack.extend((item, depth + 1, False) for item in node)
            continue
        if not named:
            _check_keywords(node, budget, param)
        for key, value in node.items():
            if not named and key in ("enum", "const"):
                continue  # data, not subschemas: counted as literals
            stack.append((value, depth + 1, not named and key in NAMED_SUBSCHEMAS))
    return size


def _check_keywords(node: dict[str, Any], budget: _Budget, param: str) -> None:
    """What one (sub)schema asks: its literals, patterns, formats, length bounds and properties."""
    limits = budget.limits
    enum = node.get("enum")
    if isinstance(enum, list):
        for value in enum:
            budget.literal(value, param)
    if "const" in node:
        budget.literal(node["const"], param)
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        budget.pattern(param)
        budget.regex(pattern, param)
    if isinstance(node.get("format"), str):
        budget.pattern(param)
    patterned = node.get("patternProperties")
    if isinstance(patterned, dict):
        for key in patterned:
            budget.pattern(param)
            budget.regex(key, param)
    properties = node.get("properties")
    if isinstance(properties, dict) and len(properties) > limits.max_properties:
        raise budget.refuse(
            f"an object schema there has {len(properties)} properties", "max_properties", param
        )
    lengths = [_count(node.get(key), limits.max_repetition) for key in LENGTH_BOUNDS]
    if any(length is not None for length in lengths):
        budget.repeat(max(length or 0 for length in lengths), param)


def _count(value: Any, limit: int) -> int | None:
    """A schema's count as an int (at most ``limit`` + 1, so that a huge one is past the limit without
    further arithmetic), or None when it is no count."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return max(0, min(int(value), limit + 1))


# ---------------------------------------------------------------------------- structural tags


def check_structural_tag(tag: dict[str, Any], budget: _Budget, param: str) -> None:
    """Every schema, regex, grammar and literal a structural tag holds (its legacy form, structures and
    triggers, or its format tree), walked once."""
    stack: list[Any] = [tag]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in TAG_SCHEMAS and isinstance(value, dict | bool):
                check_schema(value, budget, param)
            elif key in TAG_LITERALS and isinstance(value, str | list):
                for text in [value] if isinstance(value, str) else value:
                    if isinstance(text, str):
                        budget.literal(text, param)
            elif key == "pattern" and isinstance(value, str):
                budget.regex(value, param)
            elif key == "grammar" and isinstance(value, str):
                budget.grammar(value, param)
            elif isinstance(value, dict | list):
                stack.append(value)


# ---------------------------------------------------------------------------- regexes and grammars


def regex_repetition(pattern: str, limit: int) -> int:
    """The positions the {m,n} counts of ``pattern`` add when unrolled (a count on a group multiplies
    what the group holds, counts within it included; ``*``, ``+`` and ``?`` add none), at most
    ``limit`` + 1. One pass: a group's size is kept on a stack until it closes."""
    sizes = [0]  # the positions of each open group so far
    last = 0  # the positions of the atom a count would apply to
    added = 0
    i, end = 0, len(pattern)
    while i < end and added <= limit:
        char = pattern[i]
        if char == "(":
            sizes.append(0)
            i += 1
            continue
        if char == ")":
            atom = max(1, sizes.pop()) if len(sizes) > 1 else 1
            i += 1
        elif char == "|":
            i += 1
            continue
        elif char == "{":
            count, after = _brace_count(pattern, i, limit)
            if count is not None:
                extra = min(last * max(0, count - 1), limit + 1)
                added += extra
                sizes[-1] += extra
                last += extra
                i = after
                continue
            atom, i = 1, i + 1
        elif char == "\\":
            atom, i = 1, i + 2
        elif char == "[":
            atom, i = 1, _class_end(pattern, i)
        else:
            atom, i = 1, i + 1
        sizes[-1] += atom
        last = atom
    return min(added, limit + 1)


def _brace_count(pattern: str, start: int, limit: int) -> tuple[int | None, int]:
    """The count of a ``{m}``, ``{m,}`` or ``{m,n}`` at ``start`` (n, or m when open), capped at
    ``limit`` + 2 (so that what it adds is past ``limit``), and where it ends; (None, start) when the
    brace is a literal one."""
    close = pattern.find("}", start, start + 2 * _MAX_DIGITS + 8)
    if close < 0:
        return None, start
    match = re.fullmatch(r"(\d+)(?:,(\d*))?", pattern[start + 1 : close])
    if match is None:
        return None, start
    return _bounded(match.group(2) or match.group(1), limit + 1), close + 1


def _class_end(pattern: str, start: int) -> int:
    """Where the character class opened at ``start`` ends (past its ``]``), escapes skipped."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def grammar_repetition(grammar: str, limit: int) -> int:
    """What the counts of an EBNF or Lark grammar (``{m,n}``, ``~ m..n``) add in all, at most
    ``limit`` + 1: each count in full, as a rule's count applies to whatever the rule holds."""
    total = 0
    for match in chain(_BRACE_COUNT.finditer(grammar), _LARK_COUNT.finditer(grammar)):
        total += _bounded(match.group(2) or match.group(1), limit)
        if total > limit:
            return limit + 1
    return total


def _bounded(digits: str, limit: int) -> int:
    return limit + 1 if len(digits) > _MAX_DIGITS else min(int(digits), limit + 1)
