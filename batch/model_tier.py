"""Where a batch's model calls go: the config's model deployments, started for the job or attached.

- **Started** (the default): the command serves the config's small and large model, the attention scorer
  when transfer selection needs it, and a statistics holder, each as a Serve application of its own,
  with no ingress and no HTTP proxy (``proxy_location: Disabled``). The job is self-contained: its engines
  are sized by the config it names and nothing else queues on them. The command stops them at the end.
- **Attached** (``--attach APP``): the model deployments, scorer and statistics holder of an application
  already running (``serve run configs/mai-cpu.yaml`` is app ``mai``). For a machine that holds one
  stack (a second would not fit) or a cluster whose engines are already warm; the rows then share the
  engines with the app's online traffic, and its plans and audits. The config must be the app's.

Either way the actors reach them through Serve deployment handles, with the stage affinity router and
priorities the deployments were configured with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serve_app.config import AppConfig
from serve_app.core.roles import ROLES, TIER

STARTED_APP_PREFIX = "mai-batch"


class AttachError(RuntimeError):
    """An application to attach to that is not running, or lacks a model deployment."""


@dataclass(frozen=True)
class DeploymentRef:
    app: str
    deployment: str


@dataclass(frozen=True)
class Targets:
    """The deployment of each target the rows call (scorer and holder optional)."""

    small: DeploymentRef
    large: DeploymentRef
    scorer: DeploymentRef | None = None
    stats: DeploymentRef | None = None
    ledger: DeploymentRef | None = None  # the API keys' ledger: rows count against a key's quotas and usage

    def handles(self) -> tuple[Any, Any, Any, Any, Any]:
        """Handles to small, large, scorer, holder and key ledger (None where there is none), for this
        process."""
        from ray import serve

        def handle(target: DeploymentRef | None) -> Any:
            return None if target is None else serve.get_deployment_handle(target.deployment, target.app)

        return (
            handle(self.small),
            handle(self.large),
            handle(self.scorer),
            handle(self.stats),
            handle(self.ledger),
        )

    def all(self) -> list[DeploymentRef]:
        return [t for t in (self.small, self.large, self.scorer, self.stats, self.ledger) if t is not None]


def model_apps(config: AppConfig) -> dict[str, Any]:
    """The applications a job starts: the server's model tier (``serve_app.app.model_tier``), by the
    same names, without its ingress."""
    from serve_app.app import model_tier
    from serve_app.telemetry.settings import check_tracing

    return model_tier(config, tracing=check_tracing())


def start(apps: Mapping[str, Any]) -> Targets:
    """Serve each target's application (``model_apps``, or the tests' scripted ones), without HTTP, and
    wait until all run; the engines of different targets start side by side."""
    from ray import serve
    from ray.serve import RunTarget

    serve.start(proxy_location="Disabled")
    names = {name: f"{STARTED_APP_PREFIX}-{name}" for name in apps}
    serve.run_many([RunTarget(target=app, name=names[name], route_prefix=None) for name, app in apps.items()])
    return _targets({name: (names[name], _deployments(names[name])) for name in apps})


def stop(targets: Targets, timeout_s: float = 120.0) -> None:
    """Delete the applications a job started, together: every delete is asked at once, then their end
    is awaited once (a blocking delete each would poll each in turn)."""
    import time

    from ray import serve

    apps = {target.app for target in targets.all()}
    for app in apps:
        serve.delete(app, _blocking=False)
    deadline = time.monotonic() + timeout_s
    while apps & set(serve.status().applications) and time.monotonic() < deadline:
        time.sleep(0.5)


def attach(app: str) -> Targets:
    """The deployments of the running application ``app``, found by their names' prefixes."""
    deployments = _deployments(app)
    if not deployments:
        raise AttachError(f"no Serve application {app!r} is running on this Ray cluster")
    found: dict[str, tuple[str, list[str]]] = {}
    for target, prefix in TIER.items():
        names = [name for name in deployments if name.startswith(prefix)]
        if len(names) > 1:
            raise AttachError(f"application {app!r} has {len(names)} {target} deployments: {names}")
        if names:
            found[target] = (app, names)
    for role in ROLES:
        if role not in found:
            raise AttachError(
                f"application {app!r} has no {role} model deployment (one named {TIER[role]}...); "
                f"it has {sorted(deployments)}"
            )
    return _targets(found)


def _deployments(app: str) -> list[str]:
    from ray import serve

    status = serve.status().applications.get(app)
    return [] if status is None else list(status.deployments)


def _targets(found: Mapping[str, tuple[str, list[str]]]) -> Targets:
    def target(name: str) -> DeploymentRef | None:
        if name not in found:
            return None
        app, names = found[name]
        return DeploymentRef(app, names[0])

    small, large = target("small"), target("large")
    assert small is not None and large is not None
    return Targets(small, large, target("scorer"), target("stats"), target("ledger"))
