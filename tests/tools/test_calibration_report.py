"""calibration.md's tables: each rule's route shares under the header that names the routes, in the
routes' one order (``routes.ANSWERED``)."""

import pytest

from evaluation.calibration_report import CASCADE_ROUTES, render

pytestmark = pytest.mark.unit


def result(name, routes):
    return {
        "name": name,
        "accuracy": 80.0,
        "accuracy_95ci": (75.0, 85.0),
        "escalated": 0.25,
        "routes": routes,
        "small_completion_tokens": 10.0,
        "large_completion_tokens": 2.0,
        "latency_s": 1.5,
    }


def summary():
    cascade = result("mai (paper rule)", {"agree_short": 0.5, "transfer": 0.3, "fallback": 0.2})
    return {
        "dataset": "d.jsonl",
        "questions": 10,
        "goal": "within 1 point",
        "runs": ["mai-small", "mai-large", "mai-transfer"],
        "baselines": {"mai-small": result("mai-small", {"single": 1.0})},
        "paper_rule": cascade,
        "front": [],
    }


def test_each_route_share_stands_under_the_route_the_header_names():
    lines = render(summary()).splitlines()
    header = next(line for line in lines if line.startswith("| rule or baseline"))
    named = header.split("routes % (")[1].split(")")[0].split(" / ")
    assert named == [route.replace("_", " ") for route in CASCADE_ROUTES]
    row = next(line for line in lines if line.startswith("| mai (paper rule)"))
    shares = dict(zip(named, row.split(" | ")[3].split(" / "), strict=True))
    assert shares == {
        "agree short": "50",
        "confident large": "0",
        "agree reasoned": "0",
        "transfer": "30",
        "fallback": "20",
    }


def test_a_single_model_answer_is_all_single():
    row = next(line for line in render(summary()).splitlines() if line.startswith("| mai-small"))
    assert row.split(" | ")[3] == "single 100"
