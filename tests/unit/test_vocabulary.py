"""One word, one meaning: the names a client or an operator reads in the same place (a request's
``model`` and ``mai.options.plan``, a trace's ``policy``, ``plan`` and ``route``, a config's
``adaptive.table``) never share a value across enums that mean different things; every ``x-mai-*``
header the code sets has one documented meaning; and ``route`` is the answer's word alone (how it was
reached), never a name of what a request or a config says (where a request goes is its destination)."""

import itertools
import re
from pathlib import Path

import pytest

from serve_app.config import RENAMED_SETTINGS, AppConfig
from serve_app.core.contracts import Policy
from serve_app.core.plans import Plan
from serve_app.core.routes import Route
from serve_app.edge.protocol import MAIExtra
from tests.doc_tables import code_spans, table_rows

ROOT = Path(__file__).resolve().parents[2]
APART = {"plan": Plan, "policy": Policy, "route": Route}

# The values two enums may share, each with why. Keep this short: a value here reads one way in one
# place and another way in the other.
SHARED = {
    # The policy ``transfer`` (model ``mai-transfer``: always transfer the small model's reasoning)
    # and the route ``transfer`` (a cascade answer reached by the transfer stage) name the same stage's
    # answer; the policy is client-visible (the native API's ``policy`` value, the model mai-transfer),
    # so it is not renamed.
    ("policy", "route"): {"transfer"},
}

# Request fields kept under their old name for one release (CHANGELOG.md), new name -> old.
OLD_REQUEST_FIELDS = {"destination": "route"}


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(APART, 2)))
def test_the_enums_read_side_by_side_share_no_value(a, b):
    shared = {m.value for m in APART[a]} & {m.value for m in APART[b]}
    allowed = SHARED.get((a, b), set())
    assert shared <= allowed, f"{a} and {b} both name {sorted(shared - allowed)}"
    assert allowed <= shared, f"SHARED lists {sorted(allowed - shared)} for {a} and {b}: no longer shared"


def test_every_x_mai_header_the_code_sets_is_documented_once():
    sources = (ROOT / "serve_app").rglob("*.py")
    set_by_code = {
        name for path in sources for name in re.findall(r"[\"'](x-mai-[a-z-]+)[\"']", path.read_text())
    }
    assert "x-mai-route" in set_by_code  # the grep still finds them
    rows = table_rows((ROOT / "docs" / "api.md").read_text(), ("header", "meaning"))
    documented = [code_spans(row["header"])[0] for row in rows]
    assert len(documented) == len(set(documented)), f"a header documented twice: {documented}"
    assert set_by_code <= set(documented), f"undocumented: {sorted(set_by_code - set(documented))}"
    assert {name for name in documented if name.startswith("x-mai-")} <= set_by_code, "documented, never set"


def test_route_names_no_request_field_and_no_setting():
    fields = set(MAIExtra.model_fields) - set(OLD_REQUEST_FIELDS.values())
    assert not [name for name in fields if "route" in name], "a mai field says route: it is the answer's word"
    for new, old in OLD_REQUEST_FIELDS.items():
        assert new in MAIExtra.model_fields and MAIExtra.model_fields[old].exclude  # read, never written
    settings = set(AppConfig.model_fields)
    assert not [name for name in settings if "route" in name], "a setting says route"
    assert not set(RENAMED_SETTINGS) & settings and set(RENAMED_SETTINGS.values()) <= settings
