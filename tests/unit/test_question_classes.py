"""The question classes a client's task tags make (serve_app/core/decision.py: ``ClassSettings``,
``QuestionClasses``): bounded, so that tags never grow the statistics, the plan book or the Prometheus
labels without end; configured tags are always classes; the rest pool into ``<kind>/other``, and
``GET /v1/mai/stats`` says how."""

import pytest
from pydantic import ValidationError

from serve_app.config import load_app_config
from serve_app.core.decision import TASK_PATTERN, ClassSettings, QuestionClasses
from serve_app.core.prompts import PromptKind
from serve_app.edge.protocol import TASK_TAG
from serve_app.fleet.stats_holder import StatsHolder

from ..images import chat_body
from .fakes import ScriptedVLM
from .ingress_replica import client_of, holder_handle, replica

S = PromptKind.SIMPLE
BASE = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}


def test_without_a_list_the_first_tags_a_replica_sees_are_classes_and_later_ones_pool():
    classes = QuestionClasses(ClassSettings(max_tasks=2))
    assert [classes.of("yes_no", tag) for tag in ("pope", "mme", "chartqa", "pope", None)] == [
        "yes_no/pope",
        "yes_no/mme",
        "yes_no/other",  # past the cap
        "yes_no/pope",  # a class stays a class
        "yes_no",  # no tag: the kind
    ]
    assert classes.of("text", "mme") == "text/mme"  # the cap is on tags: each kind refines by them
    assert classes.of("text", "other") == "text/other"  # a client's "other" is the pool, not a class
    assert classes.tags == {"pope", "mme"}
    many = QuestionClasses(ClassSettings())
    assert len({many.of("number", f"tag{n}") for n in range(10_000)}) == ClassSettings().max_tasks + 1
    assert QuestionClasses(ClassSettings(max_tasks=0)).of("choice", "mmmu") == "choice/other"


def test_with_a_list_only_the_configured_tags_are_classes_on_every_replica():
    settings = ClassSettings(tasks=("pope", "chartqa"))
    for order in (("mme", "pope", "chartqa"), ("chartqa", "mme", "pope")):
        classes = QuestionClasses(settings)  # another replica, tags seen in another order
        assert {tag: classes.of("yes_no", tag) for tag in order} == {
            "pope": "yes_no/pope",
            "chartqa": "yes_no/chartqa",
            "mme": "yes_no/other",
        }


@pytest.mark.parametrize(
    ("classes", "says"),
    [
        ({"tasks": ["ChartQA"]}, "not task tags"),
        ({"tasks": ["other"]}, "not task tags"),
        ({"tasks": ["x" * 33]}, "not task tags"),
        ({"tasks": ["pope", "pope"]}, "twice"),
        ({"tasks": ["pope"], "max_tasks": 4}, "set one of them"),
        ({"max_tasks": -1}, "max_tasks"),
        ({"most": 3}, "most"),
    ],
)
def test_bad_class_settings_are_refused_at_start(classes, says):
    with pytest.raises(ValidationError, match=says):
        load_app_config(BASE | {"classes": classes})


def test_the_configured_tags_follow_the_requests_own_pattern():
    [pattern] = [item.pattern for item in TASK_TAG.metadata if hasattr(item, "pattern")]
    assert pattern == TASK_PATTERN


def ask(client, task):
    reply = client.post("/v1/chat/completions", json=chat_body(mai={"task": task}))
    assert reply.status_code == 200, reply.text


def test_pooled_tags_never_reach_the_statistics_or_the_metric_labels():
    config = load_app_config(BASE | {"classes": {"max_tasks": 1}})
    ingress = replica(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}), config)
    client = client_of(ingress)
    for task in ("pope", "a1", "a2", "pope", "a3"):
        ask(client, task)
    labels = [cls for cls, _ in ingress.metrics.plans]
    assert labels == ["yes_no/pope", "yes_no/other", "yes_no/other", "yes_no/pope", "yes_no/other"]
    body = client.get("/v1/mai/stats").json()
    assert set(body["classes"]) == {"yes_no/pope", "yes_no/other"}
    assert set(ingress.plans.book.classes) == {"yes_no/pope", "yes_no/other"}
    assert body["tasks"] == {"configured": [], "max_tasks": 1, "pooled": "other", "pooled_requests": 3}


def test_the_holder_says_the_configured_tags_and_the_pooled_requests_of_every_replica():
    config = load_app_config(BASE | {"classes": {"tasks": ["pope"]}})
    holder = StatsHolder(config.cascade.audit, config.cascade.adaptive, classes=config.classes)
    handle = holder_handle(holder.report, holder.snapshot)
    for name, tasks in (("a", ("pope", "mme")), ("b", ("mme", "chartqa"))):
        ingress = replica(
            ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}), config, stats=handle, name=name
        )
        for task in tasks:
            ask(client_of(ingress), task)
        body = client_of(ingress).get("/v1/mai/stats").json()  # reports, then reads the holder
    assert set(body["classes"]) == {"yes_no/pope", "yes_no/other"}
    assert body["tasks"] == {
        "configured": ["pope"],
        "max_tasks": None,
        "pooled": "other",
        "pooled_requests": 3,
    }
