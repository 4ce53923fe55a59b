"""Run the MAI application on a local Ray, in this process: for benchmarks and integration tests."""

from __future__ import annotations

import copy
import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from .paths import CONFIGS


def config_args(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``args`` of the application in ``configs/<name>``, with ``overrides`` merged in deeply."""
    [application] = yaml.safe_load((CONFIGS / name).read_text())["applications"]
    return merge(application["args"], overrides or {})


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def free_port(*taken: int) -> int:
    """A free port in 20000-29999, none of ``taken`` (ports already chosen, not yet bound): outside
    Ray's worker ports (10002-19999) and the ephemeral range that Ray's own processes draw from while
    the cluster starts."""
    start = random.randrange(20000, 30000)
    for offset in range(10000):
        port = 20000 + (start - 20000 + offset) % 10000
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-29999")


@contextmanager
def local_ray(num_cpus: int = 2, *, metrics_push_interval_s: float | None = None) -> Iterator[str]:
    """A new local Ray (never a cluster already running on the machine) with Serve's HTTP proxy on a
    free port; yields the base URL.

    ``metrics_push_interval_s`` sets Serve's environment variables for how often handles and replicas
    report to the autoscaler. Ray 2.60 does not read them yet: there a deployment's
    ``autoscaling.metrics_interval_s`` decides (Serve's default 10 s; the autoscaling bench sets 1 s)."""
    import ray
    from ray import serve

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if metrics_push_interval_s is not None:
        for name in (
            "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
            "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
        ):
            os.environ[name] = str(metrics_push_interval_s)
    port = free_port()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def deploy(
    args: dict[str, Any],
    name: str = "mai",
    *,
    timeout_s: float = 600,
    deployments: list[dict[str, Any]] | None = None,
) -> None:
    """(Re)deploy the application with these args and wait until it is running. Deployed as
    ``serve run`` deploys a config file: the application's ``import_path`` and ``args``, with the
    application-level ``autoscaling_policy`` when ``args`` ask for ``autoscaling.policy: coupled``,
    and ``deployments``: the config file's per-deployment options (Serve applies a change of them alone
    to the running replicas, without a restart)."""
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    from serve_app.config import COUPLED_POLICY, load_app_config
    from serve_app.core.scaling import ScalingPolicy

    application: dict[str, Any] = {
        "name": name,
        "route_prefix": "/",
        "import_path": "serve_app.app:build_app",
        "args": args,
    }
    if deployments:
        application["deployments"] = deployments
    if load_app_config(args).autoscaling.policy is ScalingPolicy.COUPLED:
        application["autoscaling_policy"] = {"policy_function": COUPLED_POLICY}
    before = serve.status().applications.get(name)
    client = _get_global_client()
    client.deploy_apps(ServeDeploySchema.model_validate({"applications": [application]}))
    started = time.monotonic()
    wait_running(name, timeout_s, after=before.last_deployed_time_s if before else None)
    wait_ready(client.root_url, timeout_s - (time.monotonic() - started))


def wait_ready(
    base_url: str, timeout_s: float, *, check: Callable[[], None] = lambda: None, interval_s: float = 0.5
) -> None:
    """Until the application at ``base_url`` answers ``GET /readyz`` with 200: every model deployment
    answers the ingress's own check (serve_app/edge/readiness.py). Past ``timeout_s``, the last answer
    (a 503 names what is still loading) is in the ``TimeoutError``; ``check`` runs before each try
    (it raises when the server it waits for has gone)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        check()
        try:
            response = httpx.get(f"{base_url.rstrip('/')}/readyz", timeout=10)
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        else:
            if response.status_code == 200:
                return
            last = f"{response.status_code} {response.text[:300]}"
        time.sleep(interval_s)
    raise TimeoutError(f"{base_url}/readyz not 200 after {timeout_s:g} s: {last}")


def wait_running(name: str, timeout_s: float, *, after: float | None = None) -> None:
    """Until the application, deployed later than ``after``, is RUNNING; its deploy error, raised,
    when it fails."""
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = serve.status().applications.get(name)
        fresh = status is not None and (after is None or status.last_deployed_time_s != after)
        if fresh and status.status == "RUNNING":
            return
        if fresh and status.status == "DEPLOY_FAILED":
            raise RuntimeError(f"application {name!r} failed to deploy: {status.message}")
        time.sleep(0.5)
    raise TimeoutError(f"application {name!r} not running after {timeout_s:g} s")


def replica_counts(name: str = "mai") -> dict[str, int]:
    """Running replicas per deployment of the application."""
    from ray import serve

    status = serve.status().applications[name]
    return {
        deployment: info.replica_states.get("RUNNING", 0) for deployment, info in status.deployments.items()
    }


def replica_actors(deployment: str) -> list[str]:
    """The named actors of a deployment's live replicas (each name holds the replica's id)."""
    import ray

    return sorted(
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == "serve" and f"#{deployment}#" in actor["name"]
    )


def replica_ids(name: str = "mai") -> dict[str, list[str]]:
    """deployment -> the actor names of its live replicas, for every deployment of the application:
    compared before and after a run, a changed list is a replica that died or was replaced."""
    from ray import serve

    deployments = serve.status().applications[name].deployments
    return {deployment: replica_actors(deployment) for deployment in sorted(deployments)}


def deployment_handle(deployment: str, name: str = "mai"):
    """A handle for blocking calls (``.remote().result()``) from plain code such as a test or a
    benchmark: in Serve's throughput mode a handle routes on the caller's event loop unless told to
    keep its own."""
    from ray import serve

    handle = serve.get_deployment_handle(deployment, app_name=name)
    if not handle.is_initialized:
        handle._init(_run_router_in_separate_loop=True)
    return handle
