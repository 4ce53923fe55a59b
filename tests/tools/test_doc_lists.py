"""The lists docs/api.md spells out are the code's: the plans (``Plan``), the answer kinds
(``ANSWER_KINDS``), the per-request options (``RequestOptions``), the policies' model names
(``protocol.POLICY_OF_MODEL``), the routes (``Route``) and why an audit was not run
(``auditor.NOT_RUN_REASONS``, also in docs/deploying.md's metrics table). Each is defined once in the
code; where the doc lists one, it is checked here against that definition, so a plan or kind added or
renamed fails until the doc names it."""

import re

import pytest

from serve_app.core.answers import ANSWER_KINDS
from serve_app.core.plans import Plan
from serve_app.core.routes import Route
from serve_app.edge.learning import NOT_RUN_REASONS
from serve_app.edge.observers import PROMETHEUS_METRICS
from serve_app.edge.protocol import POLICY_OF_MODEL, RequestOptions
from tests.doc_examples import ROOT
from tests.doc_tables import code_spans, section, table_rows

pytestmark = pytest.mark.unit

API = (ROOT / "docs" / "api.md").read_text()
PLANS = [plan.value for plan in Plan]


def row_of(rows: list[dict[str, str]], column: str, name: str) -> dict[str, str]:
    return next(row for row in rows if row[column] == f"`{name}`")


def test_the_plans_table_names_every_plan_once():
    rows = table_rows(section(API, "Plans"), ("plan", "stages", "answers"))
    assert [plan for row in rows for plan in code_spans(row["plan"])] == PLANS


def test_the_plan_option_lists_every_plan():
    row = row_of(table_rows(API, ("option", "default", "meaning")), "option", "plan")
    listed, _, _ = row["meaning"].partition("(see")
    assert code_spans(listed.split(":", 1)[1]) == PLANS


def test_the_plans_example_lists_every_plan():
    lists = re.findall(r"\bplans: \[([^\]]*)\]", section(API, "Plans"))
    assert lists, "the Plans section's example no longer lists plans"
    assert [[plan.strip() for plan in listed.split(",")] for listed in lists] == [PLANS] * len(lists)


def test_the_answer_kinds_are_the_matchers():
    kinds = table_rows(API, ("kind", "two answers agree when they say"))
    assert [code_spans(row["kind"])[0] for row in kinds] == list(ANSWER_KINDS)
    answer_type = row_of(table_rows(API, ("field", "meaning")), "field", "answer_type")
    assert code_spans(answer_type["meaning"]) == list(ANSWER_KINDS)


def test_the_per_request_options_are_the_ones_a_request_may_set():
    options = row_of(table_rows(API, ("field", "meaning")), "field", "options")
    assert sorted(code_spans(options["meaning"])) == sorted(RequestOptions.model_fields)


def test_the_endpoints_name_every_policys_model():
    chat = next(line for line in section(API, "Endpoints").splitlines() if "/v1/chat/completions" in line)
    named = re.search(r"`model` picks the policy \(([^)]*)\)", chat)
    assert named, "the chat endpoint's row no longer lists the policies"
    assert code_spans(named.group(1)) == list(POLICY_OF_MODEL)


def test_every_route_is_documented():
    named = set(code_spans(section(API, "Routes, and failures that never mislabel them")))
    assert {route.value for route in Route} <= named


def test_every_reason_an_audit_is_not_run_is_documented():
    audits = set(code_spans(section(API, "Audits")))
    assert set(NOT_RUN_REASONS) <= audits, set(NOT_RUN_REASONS) - audits
    deploying = (ROOT / "docs" / "deploying.md").read_text()
    row = next(line for line in deploying.splitlines() if line.startswith("| `ray_mai_audits_not_run_total`"))
    listed = row.rsplit("not run to the end:", 1)[1].strip(" |").split(", ")
    assert listed == list(NOT_RUN_REASONS)
    described = PROMETHEUS_METRICS["mai_audits_not_run"][1].split(": ", 1)[1]
    assert described.replace(" or ", ", ").split(", ") == list(NOT_RUN_REASONS)
