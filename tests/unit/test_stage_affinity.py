"""Stage affinity's pure choice (deployments/affinity.py): a call's key, rendezvous hashing, the pin and
the queue bound. The router itself: tests/integration/test_stage_router.py."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from deployments.affinity import ModelCall, call_key, preferred, rendezvous

_numbers = itertools.count()


def model_call(request: str, stage: str = "short_small") -> ModelCall:
    return ModelCall(request, stage, "simple", "yes_no", next(_numbers))


def test_a_calls_key_is_its_request_and_an_audits_is_the_audited_requests():
    assert call_key(model_call("r-1")) == "r-1"
    assert call_key(model_call("audit-r-1", "transfer_large")) == "r-1"
    assert call_key(None) is None  # a passthrough carries no call: no key


@given(
    st.text(min_size=1, max_size=12),
    st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=8, unique=True),
)
def test_rendezvous_is_stable_and_adding_a_replica_moves_a_key_only_to_it(key, replicas):
    chosen = rendezvous(key, replicas)
    assert chosen in replicas and rendezvous(key, list(reversed(replicas))) == chosen
    grown = rendezvous(key, [*replicas, "new-replica"])
    assert grown in (chosen, "new-replica")


def test_the_pin_wins_unless_past_the_queue_bound_and_no_key_routes_by_load():
    lengths = {"a": 0, "b": 5}
    length = lengths.get
    assert preferred("k", "b", ["a", "b"], length, max_queue=8) == "b"
    assert preferred("k", "b", ["a", "b"], length, max_queue=5) is None  # at the bound: by load
    assert preferred("k", "gone", ["a", "b"], lambda r: None, max_queue=1) == rendezvous("k", ["a", "b"])
    assert preferred(None, None, ["a", "b"], length, max_queue=8) is None


def test_the_router_is_on_by_default_and_a_bound_out_of_range_is_refused_naming_the_key():
    import pytest

    from deployments.settings import ModelDeployment
    from deployments.vlm import STAGE_AFFINITY_ROUTER, deployment_options

    base = {"model_id": "m", "source": "org/m", "max_ongoing_requests": 16}
    router = deployment_options(ModelDeployment(**base))["request_router_config"]
    assert router == {
        "request_router_class": STAGE_AFFINITY_ROUTER,
        "request_router_kwargs": {"max_queue": 8, "pin_ttl_s": 900.0},
    }
    with pytest.raises(ValueError, match=r"stage_affinity\.max_queue \(17\) must not exceed"):
        ModelDeployment(**base, stage_affinity={"max_queue": 17})
    with pytest.raises(ValueError, match="max_queue"):
        ModelDeployment(**base, stage_affinity={"max_queue": 0})
    with pytest.raises(ValueError, match="stage_affinity.enabled: false"):
        ModelDeployment(**base, prefix_cache_routing=True)
    off = ModelDeployment(**base, stage_affinity={"enabled": False})
    assert "request_router_config" not in deployment_options(off)
