"""A request's decision, made once before it runs (``decide``): its question class, the plan and why,
the options as they will run, and what overload relaxed. Whether the run trains the plan table
(``measures_plan``) is decided here too, and the class a client's task tag counts under
(``QuestionClasses``): the client chooses its request, never what the server learns from it.

Nothing rewrites a decision afterwards: the cascade runs its options and writes it into the trace as
the trace is built; the ingress's observers (the plan controller, the overload guard, the metrics, the
demand meter, the auditor) read it. Pure: the plan controller's choice comes in as a function, the
overload level as the reading the guard made.

Overload: escalation that bends under load (``cascade.overload``), as a state machine and a rewrite of
the options: when the large model's queue passes a bound, the cascade first stops starting audits,
then, if the queue stays past it, accepts its cheaper exits more readily within configured floors; it
restores both, with hysteresis, once the queue has drained.

Levels:
- ``normal``: the configured cascade.
- ``shed``: the queue passed ``max_large_queue``: no audit starts (an audit's Full RT run is the
  large model's most avoidable load).
- ``relax``: still past the bound ``relax_after_s`` later: each request runs with ``relax_to``'s
  thresholds (a lower ``confident_large`` settles more stage-1 disagreements with the large model's
  confident short answer; a lower ``min_confidence`` accepts more agreements; eager reasoning off).

Back to ``normal`` once the queue has stayed at or under ``restore_below`` for ``restore_after_s``.
The queue is the large model's calls in flight from this ingress replica. Pure: the ingress
(serve_app/edge/observers.py: ``OverloadGuard``) feeds it the count and the clock.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .contracts import CascadeOptions, Policy
from .plan_choice import PlanChoice
from .plans import Plan
from .trace import CascadeResult, OverloadRecord

FORCED = "forced by the request (mai.options.plan or eager_reasoning)"
RELAXED_EAGER = "; overloaded (relax_to.eager: false): eager runs sequential"


class Level(IntEnum):
    NORMAL = 0
    SHED = 1
    RELAX = 2

    @property
    def label(self) -> str:
        """The level as the trace and the statistics name it: ``normal``, ``shed`` or ``relax``."""
        return self.name.lower()


class RelaxTo(BaseModel):
    """What ``relax`` may lower each threshold to (None: leave it as configured). ``eager``'s old name
    ``eager_reasoning`` is read as it for one release (the config's warnings name it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    confident_large: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    min_confidence: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    eager: bool | None = Field(
        None, description="false: the plan eager runs sequential while relaxed (no eager reasoning)"
    )

    @model_validator(mode="before")
    @classmethod
    def _old_name(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "eager_reasoning" not in data:
            return data
        data = dict(data)
        old = data.pop("eager_reasoning")
        if "eager" in data and data["eager"] != old:
            raise ValueError(
                f"relax_to.eager_reasoning ({old!r}) and relax_to.eager ({data['eager']!r}) differ: set "
                "relax_to.eager alone (relax_to.eager_reasoning is its old name)"
            )
        return data | {"eager": old}

    @model_validator(mode="after")
    def _eager_only_off(self) -> RelaxTo:
        if self.eager:
            raise ValueError("relax_to.eager may only turn the plan eager off (false)")
        return self


class OverloadSettings(BaseModel):
    """``cascade.overload``: off unless ``max_large_queue`` is set."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_large_queue: int | None = Field(
        None, gt=0, description="the large model's calls in flight (this replica's) past which it bends"
    )
    relax_after_s: float = Field(2.0, ge=0, description="seconds past the bound before thresholds relax")
    restore_below: int | None = Field(
        None, ge=0, description="the queue at or under which it restores (default: half the bound)"
    )
    restore_after_s: float = Field(5.0, ge=0, description="seconds at or under restore_below to restore")
    relax_to: RelaxTo = RelaxTo()

    @property
    def enabled(self) -> bool:
        return self.max_large_queue is not None

    def restore_at(self) -> int:
        assert self.max_large_queue is not None
        return self.restore_below if self.restore_below is not None else self.max_large_queue // 2

    @model_validator(mode="after")
    def _restore_under_bound(self) -> OverloadSettings:
        if self.max_large_queue is not None and self.restore_at() >= self.max_large_queue:
            raise ValueError(
                f"overload.restore_below ({self.restore_at()}) must be under overload.max_large_queue "
                f"({self.max_large_queue}): the hysteresis band"
            )
        return self


def check_floors(relax_to: RelaxTo, options: CascadeOptions) -> None:
    """A floor above the threshold it relaxes would tighten the cascade under load: refused."""
    if relax_to.confident_large is not None:
        if options.confident_large is None:
            raise ValueError(
                "overload.relax_to.confident_large needs cascade.confident_large (the threshold it lowers)"
            )
        if relax_to.confident_large > options.confident_large:
            raise ValueError(
                f"overload.relax_to.confident_large ({relax_to.confident_large}) is above "
                f"cascade.confident_large ({options.confident_large}): a floor must not exceed it"
            )
    if relax_to.min_confidence is not None and relax_to.min_confidence > options.min_confidence:
        raise ValueError(
            f"overload.relax_to.min_confidence ({relax_to.min_confidence}) is above "
            f"cascade.min_confidence ({options.min_confidence}): a floor must not exceed it"
        )


@dataclass
class OverloadState:
    """The level, moved by each reading of the queue (``update``)."""

    settings: OverloadSettings
    level: Level = Level.NORMAL
    over_since: float | None = None  # when the queue last went past the bound
    calm_since: float | None = None  # when the queue last went to or under restore_below

    def update(self, queue: int, now: float) -> Level:
        settings = self.settings
        if settings.max_large_queue is None:
            return Level.NORMAL
        if queue > settings.max_large_queue:
            self.calm_since = None
            if self.over_since is None:
                self.over_since = now
            if self.level is Level.NORMAL:
                self.level = Level.SHED
            if self.level is Level.SHED and now - self.over_since >= settings.relax_after_s:
                self.level = Level.RELAX
            return self.level
        self.over_since = None
        if queue <= settings.restore_at():
            if self.calm_since is None:
                self.calm_since = now
            if now - self.calm_since >= settings.restore_after_s:
                self.level = Level.NORMAL
        else:
            self.calm_since = None
        return self.level


def relaxed_options(
    options: CascadeOptions, relax_to: RelaxTo
) -> tuple[CascadeOptions, dict[str, tuple[Any, Any]]]:
    """The request's options with ``relax_to``'s floors applied (a threshold already under its floor
    stays), and what changed: ``{name: (from, to)}``. The plan is not an option here: an eager plan
    running sequential is part of the request's decision (``decide``)."""
    update: dict[str, Any] = {}
    if relax_to.confident_large is not None and options.confident_large is not None:
        if relax_to.confident_large < options.confident_large:
            update["confident_large"] = relax_to.confident_large
    if relax_to.min_confidence is not None and relax_to.min_confidence < options.min_confidence:
        update["min_confidence"] = relax_to.min_confidence
    changed = {name: (getattr(options, name), value) for name, value in update.items()}
    return options.model_copy(update=update), changed


def fleet_overload(enabled: bool, levels: Iterable[str]) -> dict[str, Any]:
    """``overload`` in the ``GET /v1/mai/stats`` body: whether ``cascade.overload`` is on, the highest of
    the ingress replicas' ``levels`` (their labels; ``normal`` when there are none) and how many replicas
    are at each level."""
    replicas = {level.label: 0 for level in Level}
    for label in levels:
        replicas[label] += 1
    highest = max((level for level in Level if replicas[level.label]), default=Level.NORMAL)
    return {"enabled": enabled, "level": highest.label, "replicas": replicas}


@dataclass(frozen=True)
class OverloadReading:
    """The overload guard's reading for one request: the level it moved to, and the large model's
    queue it read."""

    level: Level
    large_queue: int


@dataclass(frozen=True)
class Decision:
    cls: str  # the question class the statistics count it under (``class_of``)
    options: CascadeOptions  # as the request runs: the cascade's plan set, thresholds as relaxed
    plan: PlanChoice | None  # the plan and why; None for a policy that is not the cascade
    overload: OverloadRecord | None  # None: not overloaded
    # The run measures the class's plan: a plan the server chose, run with the server's options, none
    # relaxed. Only such runs train the plan table (edge/learning.py: ``PlanController.answered``).
    measures_plan: bool
    # The request's own options change what its stages do (``runs_as_configured``): its audits count
    # apart from the configured exits' (edge/learning.py: ``audited_route``).
    own_options: bool = False

    @property
    def relaxed(self) -> bool:
        return self.overload is not None and bool(self.overload.relaxed)

    @property
    def cascade(self) -> bool:
        """The request runs MAI's cascade (under a plan), not a single policy: decided here, once."""
        return self.plan is not None


def plan_to_run(options: CascadeOptions, decision: Decision | None) -> Plan | None:
    """The plan a run follows, None for a single policy: the decision's; without one (an audit, a
    replay), the plan its options name, else the paper's."""
    if decision is not None:
        return decision.plan.plan if decision.plan is not None else None
    return (options.plan or Plan.SEQUENTIAL) if options.policy is Policy.CASCADE else None


class Observer(Protocol):
    """What the ingress tells once a request has answered: its decision and its result."""

    def answered(self, decision: Decision, result: CascadeResult) -> None: ...


def class_of(kind: str, task: str | None = None) -> str:
    """A question's class: its answer kind, refined by a task tag (``QuestionClasses.task`` bounds the
    client's tags). What the statistics count under (routes, plans, audits, metrics) and what the plan
    controller chooses a plan for."""
    return kind if not task else f"{kind}/{task}"


# A client's task tag (``mai.task``; serve_app/edge/protocol.py validates it with the same pattern).
TASK_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,31}$"
# The task of the classes that pool the tags that are not classes of their own: ``<kind>/other``.
POOLED_TASK = "other"


class ClassSettings(BaseModel):
    """``classes`` in the server config: which of the clients' ``mai.task`` tags refine a question's class.
    Every class is a row of the statistics and the plan book and a label of the Prometheus series, kept
    for the replica's life, so the tags a client sends must not make classes without bound."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: tuple[str, ...] = Field(
        (),
        description="tags that are classes of their own (<kind>/<task>); with a list, every other tag "
        "pools into <kind>/other, on every replica alike",
    )
    max_tasks: int = Field(
        0,
        ge=0,
        le=1000,
        description="with no tasks listed: the first tags a replica sees that become classes of their own; "
        "later ones pool into <kind>/other (0: every tag pools; a client that sends tags first would take "
        "these places, and each new replica keeps its own)",
    )

    @model_validator(mode="after")
    def _tags_are_tags(self) -> ClassSettings:
        bad = [tag for tag in self.tasks if not re.match(TASK_PATTERN, tag) or tag == POOLED_TASK]
        if bad:
            raise ValueError(
                f"classes.tasks {bad} are not task tags (1 to 32 lower-case letters, digits or . _ -, "
                f"not {POOLED_TASK!r}, the pooled classes' name)"
            )
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("classes.tasks names a tag twice")
        if self.tasks and "max_tasks" in self.model_fields_set:
            raise ValueError(
                "classes.max_tasks bounds the tags of a replica with no classes.tasks listed; with a list, "
                "every tag not on it pools into <kind>/other: set one of them"
            )
        return self


class QuestionClasses:
    """One replica's question classes: the task tags that refine a class, decided once per request
    (``of``). With ``tasks`` listed, those tags and no other (the same classes on every replica); else
    the first ``max_tasks`` distinct tags this replica sees (replicas that see tags in another order
    may keep others). Any other tag pools into ``<kind>/other``."""

    def __init__(self, settings: ClassSettings):
        self.settings = settings
        self.tags: set[str] = set(settings.tasks)  # the tags that are classes of their own

    def task(self, tag: str | None) -> str | None:
        """The task a request's ``tag`` counts under: itself, ``POOLED_TASK``, or None without one."""
        if tag is None or tag in self.tags:
            return tag
        if not self.settings.tasks and tag != POOLED_TASK and len(self.tags) < self.settings.max_tasks:
            self.tags.add(tag)
            return tag
        return POOLED_TASK

    def of(self, kind: str, tag: str | None) -> str:
        """The class of a request of answer kind ``kind`` with the client's task ``tag``."""
        return class_of(kind, self.task(tag))


def tasks_summary(
    settings: ClassSettings, classes: Iterable[str], requests: Callable[[str], int]
) -> dict[str, Any]:
    """``tasks`` in the ``GET /v1/mai/stats`` body: the configured tags, the cap on the others (None when
    tags are listed: every other one pools), and the requests counted in ``<kind>/other`` classes, whose
    tags were pooled (``requests``: a class's requests)."""
    pooled = sum(requests(cls) for cls in classes if cls.endswith("/" + POOLED_TASK))
    return {
        "configured": list(settings.tasks),
        "max_tasks": None if settings.tasks else settings.max_tasks,
        "pooled": POOLED_TASK,
        "pooled_requests": pooled,
    }


def decide(
    options: CascadeOptions,
    cls: str,
    *,
    server: CascadeOptions,
    choose: Callable[[], PlanChoice],
    read_overload: Callable[[], OverloadReading | None] = lambda: None,
    relax_to: RelaxTo | None = None,
) -> Decision:
    """The decision for a request of class ``cls`` with its own ``options`` (the server's defaults and
    the request's overrides). For the cascade: at ``relax``, ``relax_to``'s floors replace the request's
    thresholds; a plan the request forced (``options.plan``) runs as it is, else ``choose`` picks one
    (the plan controller: ``plan_choice.choose_plan``); at ``relax`` with ``relax_to.eager:
    false``, an eager plan runs sequential (the same answers, less small-model work). A run measures
    the class's plan when the server chose it (not forced), its options are ``server``'s in all that
    changes what the stages do (``runs_as_configured``) and nothing was relaxed: a client steers its own
    request, never what the plan table learns."""
    if options.policy is not Policy.CASCADE:
        return Decision(cls, options, None, None, measures_plan=False)
    overload = read_overload()  # a cascade request's reading moves the level; no other's does
    configured = runs_as_configured(options, server)
    relax_to = relax_to or RelaxTo()
    relaxing = overload is not None and overload.level is Level.RELAX
    relaxed: dict[str, tuple[Any, Any]] = {}
    if relaxing:
        options, changed = relaxed_options(options, relax_to)
        relaxed.update(changed)
    forced = options.plan is not None
    choice = PlanChoice(options.plan, FORCED) if options.plan is not None else choose()
    if relaxing and relax_to.eager is False and choice.plan is Plan.EAGER:
        choice = dataclasses.replace(choice, plan=Plan.SEQUENTIAL, reason=choice.reason + RELAXED_EAGER)
        relaxed["plan"] = (Plan.EAGER.value, Plan.SEQUENTIAL.value)
    options = options.model_copy(update={"plan": choice.plan})
    record = None
    if overload is not None and overload.level is not Level.NORMAL:
        record = OverloadRecord(overload.level.label, overload.large_queue, relaxed)
    measures = not forced and not relaxed and configured
    return Decision(cls, options, choice, record, measures_plan=measures, own_options=not configured)


# What a request may set that leaves its stages' work as configured: which plan and policy (decided
# apart), what happens once the large model failed, and the logprobs its reply carries.
_NOT_THE_STAGES: dict[str, Any] = {
    "policy": True,
    "plan": True,
    "on_large_failure": True,
    "decoding": {"logprobs", "top_logprobs"},
    # The explain policies' budget: no stage of the cascade runs with it (a client's max_tokens cap
    # under it, lmms-eval's 16 to 128, leaves the cascade's stages as configured).
    "max_tokens": {"explain"},
}
_OPTIONS = set(CascadeOptions.model_fields)


def runs_as_configured(options: CascadeOptions, server: CascadeOptions) -> bool:
    """Whether ``options`` make the stages do what ``server``'s do: the same thresholds, budgets,
    timeouts, prompts, transfer, answer forms and sampling (a request's own settle other shares at
    stage 1, or take other times)."""
    own = options.model_dump(include=_OPTIONS, exclude=_NOT_THE_STAGES)
    return own == server.model_dump(include=_OPTIONS, exclude=_NOT_THE_STAGES)
