"""The defaults docs/api.md states are the configuration models' own: every row of its options table,
and the defaults its prose gives in parentheses, read from the models' field defaults (a default
written once, in the model, and checked here wherever the doc repeats it)."""

import re
from collections.abc import Callable
from enum import Enum
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from serve_app.config import CascadeConfig, Limits, Readiness
from serve_app.core.audit import AuditSettings
from serve_app.core.decision import ClassSettings
from tests.doc_examples import ROOT
from tests.doc_tables import table_rows

pytestmark = pytest.mark.unit

API = (ROOT / "docs" / "api.md").read_text()
OPTIONS = table_rows(API, ("option", "default", "meaning"))
# How the table writes a default of None: the option is decided per request (by the policy, the answer
# kind, the plan controller) or is off.
UNSET = {"per policy", "per kind", "learnt", "off", "none"}
# Server settings of the cascade section that the table leaves to sections of their own.
ELSEWHERE = {
    "policy": "a request's model names it (Endpoints)",
    "decoding": "a request's sampling parameters (Parameters)",
    "audit": "Audits",
    "adaptive": "Plans",
    "overload": "scaling.md, when the large model is overloaded",
}


def default_of(model: type[BaseModel], name: str) -> Any:
    """A field's default as the doc writes it: an enum as its value, a nested model as its fields
    (None when every field of it is None)."""
    value = model.model_fields[name].get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        fields = value.model_dump(mode="json")
        return None if all(field is None for field in fields.values()) else fields
    return value.value if isinstance(value, Enum) else value


def documented(cell: str) -> Any:
    """A default as the table writes it: `0.01` (YAML), a word for None, or ``name value, ...``."""
    if match := re.fullmatch(r"`([^`]*)`", cell):
        return yaml.safe_load(match.group(1))
    if cell in UNSET:
        return None
    pairs = re.fullmatch(r"\w+ \S+(, \w+ \S+)*", cell) and [pair.split(" ") for pair in cell.split(", ")]
    if not pairs:
        raise ValueError(f"a default the check cannot read: {cell!r}")
    return {name: yaml.safe_load(value) for name, value in pairs}


def test_the_table_names_every_setting_of_the_cascade_section_once():
    names = [re.fullmatch(r"`(\w+)`", row["option"]).group(1) for row in OPTIONS]
    assert len(names) == len(set(names)), names
    assert set(names) == set(CascadeConfig.model_fields) - set(ELSEWHERE)


@pytest.mark.parametrize("row", OPTIONS, ids=lambda row: row["option"].strip("`"))
def test_each_default_in_the_table_is_the_models(row):
    name = row["option"].strip("`")
    assert documented(row["default"]) == default_of(CascadeConfig, name), row


@pytest.mark.parametrize(
    ("cell", "read"),
    [
        ("`0.01`", 0.01),
        ("`false`", False),
        ("`full`", "full"),
        ("off", None),
        ("simple 32, explain 512", {"simple": 32, "explain": 512}),
    ],
)
def test_the_table_is_read_as_written(cell, read):
    assert documented(cell) == read


def test_a_default_the_check_cannot_read_fails_it():
    with pytest.raises(ValueError, match="cannot read"):
        documented("about a third")


# The defaults the prose repeats: the sentence (spaces match any whitespace, a line break too) with the
# default as its one group, and the model's value the doc must say.
PROSE: list[tuple[str, Callable[[], Any]]] = [
    (
        r"decimals within `decimal_tolerance` \((\d+) %\)",
        lambda: round(100 * default_of(CascadeConfig, "decimal_tolerance")),
    ),
    (r"`decimal_tolerance` .* at most ([\d.]+)\)", lambda: _bound(CascadeConfig, "decimal_tolerance", "le")),
    (
        r"answered again by the `reference` policy \(default `([\w-]+)`",
        lambda: default_of(AuditSettings, "reference"),
    ),
    (r"`audit.alert_min_samples` \((\d+)\)", lambda: default_of(AuditSettings, "alert_min_samples")),
    (r"while `max_in_flight` \((\d+)\) audits", lambda: default_of(AuditSettings, "max_in_flight")),
    (r"the first `max_tasks` \((\d+)\) distinct tags", lambda: default_of(ClassSettings, "max_tasks")),
    (r"every `report_interval_s` \(([\d.]+) s\)", lambda: default_of(AuditSettings, "report_interval_s")),
    (r"deeper than `limits.max_json_depth` \((\d+)\)", lambda: default_of(Limits, "max_json_depth")),
    (r"up to `readiness.wait_s` \(([\d.]+) s by default", lambda: default_of(Readiness, "wait_s")),
]


def _bound(model: type[BaseModel], name: str, bound: str) -> Any:
    """A field's bound (``le``, ``ge``, ...) as its constraints hold it."""
    return next(getattr(item, bound) for item in model.model_fields[name].metadata if hasattr(item, bound))


@pytest.mark.parametrize(("sentence", "value"), PROSE, ids=[sentence for sentence, _ in PROSE])
def test_each_default_the_prose_repeats_is_the_models(sentence, value):
    found = re.search(sentence.replace(" ", r"\s+"), API)
    assert found, f"docs/api.md no longer says {sentence!r}: update the check with the doc"
    assert yaml.safe_load(found.group(1)) == value()
