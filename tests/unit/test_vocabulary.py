"""One word, one meaning: the names a client or an operator reads in the same place (a request's
``model`` and ``mai.options.plan``, a trace's ``policy``, ``plan`` and ``route``, a config's
``adaptive.table``) never share a value across enums that mean different things."""

import pytest

from serve_app.core.options import Policy
from serve_app.core.plans import RENAMED, Plan
from serve_app.core.routes import Route

APART = {"plan": Plan, "policy": Policy, "route": Route}


@pytest.mark.parametrize(("a", "b"), [("plan", "policy"), ("plan", "route")])
def test_the_enums_read_side_by_side_share_no_value(a, b):
    shared = {m.value for m in APART[a]} & {m.value for m in APART[b]}
    assert not shared, f"{a} and {b} both name {sorted(shared)}"


def test_every_old_plan_name_is_a_policy_and_its_new_name_a_plan():
    policies = {policy.value for policy in Policy}
    assert set(RENAMED) <= policies
    assert all(isinstance(new, Plan) for new in RENAMED.values())
    assert len(set(RENAMED.values())) == len(RENAMED)


def test_a_plans_old_name_is_refused_naming_the_new_one():
    from pydantic import TypeAdapter, ValidationError

    from serve_app.core.plans import PlanName

    adapter = TypeAdapter(PlanName)
    assert adapter.validate_python("full-transfer") is Plan.FULL_TRANSFER
    for old, new in RENAMED.items():
        with pytest.raises(ValidationError, match=f"plan '{old}' is now named '{new.value}'"):
            adapter.validate_python(old)
