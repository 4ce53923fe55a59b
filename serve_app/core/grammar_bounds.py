"""The bounds on what a request may ask the engines' grammar compiler (``limits.grammar``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GrammarLimits(BaseModel):
    """What a request passed to a model may ask the engines' grammar compiler through
    ``structured_outputs``, ``response_format`` and ``tools`` (unless ``tool_choice`` is ``none``):
    past a bound, a 400 naming it (serve_app/edge/grammar_limits.py, docs/api.md). The defaults keep the
    worst request each admits well under a second of compile time (bench/results/grammar-limits.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_schema_bytes: int = Field(32_768, ge=64)  # each JSON schema, as compact JSON
    max_schema_depth: int = Field(16, ge=2)  # its objects and arrays nested
    max_properties: int = Field(256, ge=1)  # of one object schema
    max_enum_values: int = Field(1_000, ge=1)  # enum, const, choice values and tags' literals, in all
    max_enum_bytes: int = Field(16_384, ge=1)  # their bytes in all
    max_literal_bytes: int = Field(256, ge=1)  # of each (a prefix values share costs its square)
    max_regex_bytes: int = Field(4_096, ge=16)  # each regex: structured_outputs', a schema's pattern
    max_patterns: int = Field(64, ge=0)  # patterns and string formats of the schemas, in all
    max_repetition: int = Field(4_096, ge=1)  # minLength/maxLength and {m,n} counts unrolled, in all
    max_grammar_bytes: int = Field(8_192, ge=0)  # structured_outputs.grammar (EBNF or Lark)
    max_structural_tag_bytes: int = Field(32_768, ge=64)
    max_tools: int = Field(64, ge=1)
    max_tool_schema_bytes: int = Field(65_536, ge=64)  # the tools' parameter schemas together
