"""The application's autoscaling policy: the cascade's models scaled together (``autoscaling.policy:
coupled``, serve_app/core/scaling.py), as a Ray Serve application-level ``autoscaling_policy``.

Ray Serve calls it on its controller every control-loop tick with every deployment's
``AutoscalingContext`` and sets all replica counts from what it returns; Serve still applies each
deployment's own ``upscale_delay_s``, ``downscale_delay_s``, scaling factors and
``min_replicas``/``max_replicas`` to the answer. A config names it beside the application's ``args``::

    autoscaling_policy:
      policy_function: serve_app.fleet.autoscaling_policy:coupled_policy

- The small and the large model (deployments ``small:<id>`` / ``large:<id>``): the ingress replicas'
  reported demand (serve_app/edge/observers.py, Serve's custom autoscaling metrics), never fewer than the
  model's own queue asks for. When no ingress replica has reported a measured demand, or the app runs
  ``autoscaling.policy: per-deployment``, the queue alone decides: Ray Serve's own rule.
- Every other deployment (the ingress, the statistics holder, the scorer): its own queue.
"""

from __future__ import annotations

import logging
from typing import Any

from ..core.roles import ROLES
from ..core.scaling import (
    AUTOSCALING_METRICS,
    IngressDemand,
    ScalingDecision,
    coupled_decision,
    demand_of,
    queue_replicas,
)

logger = logging.getLogger("ray.serve")

INGRESS = "MAIIngress"
STATE_KEY = "mai_decision"


def role_of(deployment_name: str) -> str | None:
    """``small`` / ``large`` for the model deployments (``"<role>:<model_id>"``), else None."""
    role, separator, _ = deployment_name.partition(":")
    return role if separator and role in ROLES else None


def ingress_demands(contexts: dict[Any, Any]) -> list[IngressDemand]:
    """Each ingress replica's reported demand (the look-back mean of its custom metrics)."""
    for ctx in contexts.values():
        if ctx.deployment_name != INGRESS:
            continue
        metrics = ctx.aggregated_metrics or {}
        replicas = set().union(*(metrics.get(name, {}).keys() for name in AUTOSCALING_METRICS))
        reports = (
            {name: metrics[name][r] for name in AUTOSCALING_METRICS if r in metrics.get(name, {})}
            for r in replicas
        )
        return [demand for report in reports if (demand := demand_of(report)) is not None]
    return []


def scaling_decision(ctx: Any, demands: list[IngressDemand]) -> ScalingDecision:
    """One deployment's replicas: coupled for the two models, the queue's rule for the rest."""
    target = ctx.config.get_target_ongoing_requests()
    role = role_of(ctx.deployment_name)
    if ctx.current_num_replicas == 0:  # Serve's rule at zero: keep the target it set
        replicas = float(ctx.target_num_replicas)
        return ScalingDecision(replicas, replicas, None, None, "no replica running")
    if role is None:
        by_queue = queue_replicas(ctx.total_num_requests, target)
        return ScalingDecision(by_queue, by_queue, None, None, "queue")
    return coupled_decision(
        role, demands, ongoing_requests=ctx.total_num_requests, target_ongoing_requests=target
    )


def coupled_policy(contexts: dict[Any, Any]) -> tuple[dict[Any, float], dict[Any, dict]]:
    """Ray Serve's application-level policy: ``{deployment_id: replicas}`` and each one's state (the
    last decision, kept for the logs; Serve adds its delay counters to it)."""
    demands = ingress_demands(contexts)
    decisions: dict[Any, float] = {}
    state: dict[Any, dict] = {}
    for deployment_id, ctx in contexts.items():
        decision = scaling_decision(ctx, demands)
        decisions[deployment_id] = decision.replicas
        previous = ctx.policy_state.get(STATE_KEY, {})
        summary = {"reason": decision.reason, "replicas": round(decision.replicas, 2)}
        if role_of(ctx.deployment_name) and previous.get("reason") != decision.reason:
            logger.info(
                "MAI autoscaling %s: %s (queue %.2f, demand %s replicas)",
                ctx.deployment_name,
                decision.reason,
                decision.queue_replicas,
                "-" if decision.coupled_replicas is None else f"{decision.coupled_replicas:.2f}",
            )
        state[deployment_id] = {STATE_KEY: summary}
    return decisions, state
