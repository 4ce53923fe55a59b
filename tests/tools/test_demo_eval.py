"""The demo evaluation's own figures, from the compact predictions it commits: the question-only
baseline, accuracy by question type and on the balanced yes/no set, the typed forms beside the display
form, and what reasoning transfer did on the escalated questions."""

import json
import shlex

import pytest

from evaluation.demo_eval import typed_records
from evaluation.demo_summary import (
    accuracy_by_type,
    build_summary,
    compact_rows,
    question_prior,
    render,
    transfer_effect,
    write_tables,
)
from evaluation.rules import PAPER_RULE_AND_PLAN
from harness.easy_vqa import question_type

TRAIN = [
    ("what color is the circle?", "red"),
    ("what color is the circle?", "red"),
    ("what color is the circle?", "blue"),
    ("is there a red shape?", "no"),
    ("is there a red shape?", "no"),
    ("is there a red shape?", "yes"),
    ("what color is the triangle?", "green"),
    ("what shape is present?", "circle"),
    ("is there a blue shape?", "no"),
]
RECORDS = [
    {"id": "easy-vqa-test-1", "question": "Is there a red shape?", "answer": "yes"},
    {"id": "easy-vqa-test-2", "question": "What color is the circle?", "answer": "red"},
    {"id": "easy-vqa-test-3", "question": "What shape is present?", "answer": "circle"},
    {"id": "easy-vqa-test-4", "question": "Is there a blue shape?", "answer": "no"},
    {"id": "easy-vqa-balanced-test-0", "question": "Is there a red shape?", "answer": "no"},
    {"id": "easy-vqa-balanced-test-1", "question": "Is there a blue shape?", "answer": "yes"},
]


def prediction(score, route="single", small=0, large=4, status=200, latency=0.1):
    return {
        "answer": "x",
        "score": score,
        "route": route,
        "latency_s": latency,
        "status": status,
        "stages": [
            {"model": "small", "completion_tokens": small},
            {"model": "large", "completion_tokens": large},
        ],
    }


PREDICTIONS = {
    "mai-large": {r["id"]: prediction(1.0 if i % 2 == 0 else 0.0) for i, r in enumerate(RECORDS)},
    "mai": {
        "easy-vqa-test-1": prediction(1.0, "agree_short", 4, 4),
        "easy-vqa-test-2": prediction(1.0, "transfer", 50, 8),
        "easy-vqa-test-3": prediction(0.0, "transfer", 50, 8),
        "easy-vqa-test-4": prediction(1.0, "transfer", 50, 8),
        "easy-vqa-balanced-test-0": prediction(1.0, "agree_short", 4, 4),
        "easy-vqa-balanced-test-1": prediction(0.0, status=503),
    },
}
META = {"concurrency": 8, "wall_s": {"mai": 12.5, "mai-large": 3.0}, "command": "make eval-demo"}


def test_question_prior_answers_the_most_common_training_answer():
    predict = question_prior(TRAIN)
    assert predict("What color is the circle?") == "red"
    assert predict("is there a red shape?") == "no"
    # Unseen text: the template with colours and shapes blanked ("is there a _ shape?").
    assert predict("Is there a teal shape?") == "no"
    assert predict("What color is the rectangle?") == "red"
    # Nothing alike: the most common answer overall.
    assert predict("How big is it?") == "no"


def test_question_types():
    assert question_type("Is there not a red shape?", "yes") == "yes/no"
    assert question_type("What color is the circle?", "red") == "color"
    assert question_type("What is the blue shape?", "circle") == "shape"


def test_compact_rows_keep_every_policys_answer_score_route_latency_and_tokens():
    rows = compact_rows(RECORDS, PREDICTIONS)
    assert [row["set"] for row in rows] == ["easy-vqa"] * 4 + ["balanced yes/no"] * 2
    assert rows[1]["policies"]["mai"] == ["x", 1.0, "transfer", 0.1, 50, 8, 200]
    easy = [row for row in rows if row["set"] == "easy-vqa"]
    assert accuracy_by_type(easy, "mai") == {"all": 0.75, "color": 1.0, "shape": 0.0, "yes/no": 1.0}
    # mai escalated test-2, 3, 4 by transfer; mai-large was right on 2 of the 3 (test-3 only: index 2).
    assert transfer_effect(easy) == {
        "questions": 3,
        "large_simple_accuracy": pytest.approx(1 / 3),
        "after_transfer_accuracy": pytest.approx(2 / 3),
    }


def test_the_summary_and_table_come_from_the_compact_rows_alone(tmp_path):
    typed = typed_records(RECORDS)
    assert [r["id"] for r in typed[:2]] == ["easy-vqa-test-1|lower", "easy-vqa-test-1|typed"]
    assert typed[0]["question"] == "is there a red shape?" and len(typed) == 8
    lower = [dict(r, id=r["id"].split("|")[0]) for r in typed if r["id"].endswith("|lower")]
    rows = compact_rows(RECORDS, PREDICTIONS) + compact_rows(
        lower, {"mai-large": {r["id"]: prediction(1.0) for r in lower}}, form="lower"
    )
    summary = build_summary(META, rows, question_prior(TRAIN))
    mai = summary["policies"]["mai"]
    assert mai["accuracy"]["all"] == 0.75 and mai["balanced_yes_no"] == 0.5 and mai["errors"] == 1
    assert mai["route_shares"] == {"agree_short": pytest.approx(2 / 6), "transfer": 0.5}
    assert mai["tokens"]["small"] == pytest.approx((4 + 150 + 4) / 6) and mai["wall_s"] == 12.5
    assert summary["as_typed"] == {"mai-large": {"display": 0.5, "lower": 1.0}}
    assert summary["question_prior"]["balanced"] == 0.5  # "no" to both balanced questions: one right
    table = render(summary)
    assert "| question only (no image) | 75.0 |" in table and "| mai | 75.0 |" in table
    assert "| mai-large | 50.0 | 100.0 |" in table and "on the 3 questions" in table
    lines = table.splitlines()
    assert lines.index(next(line for line in lines if line.startswith("| mai-large "))) < lines.index(
        next(line for line in lines if line.startswith("| mai "))
    )
    # Re-derived from the rows (with easy-vqa's own train questions for the baseline): the same figures.
    record = {"command": "python -m evaluation.demo_eval --table", "commit": "c0ffee"}
    written = write_tables(tmp_path, META, rows, record)
    assert written == (tmp_path / "demo.md").read_text()
    demo = json.loads((tmp_path / "demo.json").read_text())
    assert demo["meta"] == record and list(demo)[-1] == "meta" and demo["command"] == "make eval-demo"
    assert [line for line in written.splitlines() if line.startswith("| mai")] == [
        line for line in lines if line.startswith("| mai")
    ]


def command(argv):
    return "python -m evaluation.demo_eval " + shlex.join(argv)


def record_calls(monkeypatch, module, name):
    """Replace ``module.name`` with a recorder of its calls (status 0)."""
    calls = []
    monkeypatch.setattr(module, name, lambda *args, **kwargs: calls.append((args, kwargs)) or 0)
    return calls


@pytest.mark.parametrize("fresh", [False, True])
def test_calibrate_passes_fresh_on_to_mai_eval(tmp_path, monkeypatch, fresh):
    import evaluation.demo_eval as demo_eval
    from harness.local_server import config_args

    monkeypatch.setattr(demo_eval, "DATASETS", tmp_path)
    (tmp_path / "easy-vqa-validation-10-balanced-5.jsonl").write_text("{}\n")
    calls = record_calls(monkeypatch, demo_eval, "calibrate_pass")
    argv = ["--calibrate", "--calibration-questions", "10", "--url", "http://server", "--out", str(tmp_path)]
    argv += ["--fresh"] if fresh else []
    assert demo_eval.main(argv) == 0
    [(args, call)] = calls
    assert args == (tmp_path / "easy-vqa-validation-10-balanced-5.jsonl", tmp_path)
    assert call["fresh"] is fresh
    assert call["url"] == "http://server"
    # The files it writes name the command as typed; a server started elsewhere has no config here.
    assert call["command"] == command(argv) and call["config"] is None
    objective = config_args("mai-cpu.yaml")["cascade"]["adaptive"]["objective"]
    assert call["objective"] == objective and call["settings"].concurrency == 8


def test_either_or_runs_both_forms_of_the_questions(tmp_path, monkeypatch):
    import evaluation.demo_eval as demo_eval

    monkeypatch.setattr(demo_eval, "DATASETS", tmp_path)
    monkeypatch.setattr(demo_eval, "EITHER_OR", tmp_path / "either-or")
    for name in ("named", "choices"):
        (tmp_path / f"easy-vqa-validation-either-or-{name}-200.jsonl").write_text("{}\n")
    calls = record_calls(monkeypatch, demo_eval, "run_eval")
    argv = ["--either-or", "--url", "http://server", "--concurrency", "4"]
    assert demo_eval.main(argv) == 0
    assert [args[0].name for args, _ in calls] == [
        "easy-vqa-validation-either-or-named-200.jsonl",
        "easy-vqa-validation-either-or-choices-200.jsonl",
    ]
    for (args, call), name in zip(calls, ("named", "choices"), strict=True):
        assert args[1] == tmp_path / "either-or" / name
        assert [run.name for run in args[2]] == ["mai", "mai-small", "mai-large"]
        assert call["baseline"] == "mai-large" and call["url"] == "http://server"
        assert call["command"] == command(argv) and call["settings"].concurrency == 4
        assert call["fresh"] is False


def test_the_evaluation_runs_every_policy_then_writes_demo_json_naming_its_command(tmp_path, monkeypatch):
    import evaluation.demo_eval as demo_eval
    from harness.provenance import git_commit

    monkeypatch.setattr(demo_eval, "DATASETS", tmp_path)
    (tmp_path / "demo-test-4-balanced-500.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    calls = record_calls(monkeypatch, demo_eval, "run_eval")
    rows = compact_rows(RECORDS, PREDICTIONS)
    monkeypatch.setattr(demo_eval, "collect", lambda out, records, typed, concurrency: (META, rows))
    out = tmp_path / "demo"
    argv = ["--url", "http://server", "--limit", "4", "--out", str(out)]
    assert demo_eval.main(argv) == 0
    (main_args, main_run), (typed_args, typed_run) = calls
    assert main_args[1] == out and main_run["baseline"] == "mai-transfer"
    assert [run.name for run in main_args[2]] == list(demo_eval.RUN_NAMES)
    paper = main_args[2][5]  # the paper's rule and plan, as the server reads a request's options
    assert paper.name == "mai-paper-rule" and dict(paper.options) == PAPER_RULE_AND_PLAN
    assert typed_args[0] == tmp_path / "demo-test-4-typed.jsonl" and typed_args[1] == out / "typed"
    assert [run.name for run in typed_args[2]] == ["mai-small", "mai-large"] and "baseline" not in typed_run
    assert {call["command"] for _, call in calls} == {command(argv)}
    meta = json.loads((out / "demo.json").read_text())["meta"]
    assert meta["command"] == command(argv) and meta["commit"] == git_commit()["commit"]
    assert "config" not in meta and meta["duration_s"] >= 0
    assert json.loads((out / "predictions.jsonl").read_text().splitlines()[0]) == {"meta": META}


def test_the_table_rederived_names_the_command_and_commit(tmp_path):
    import evaluation.demo_eval as demo_eval
    from harness.provenance import git_commit

    rows = compact_rows(RECORDS, PREDICTIONS)
    lines = [{"meta": META}, *rows]
    (tmp_path / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = ["--table", "--out", str(tmp_path)]
    assert demo_eval.main(argv) == 0
    demo = json.loads((tmp_path / "demo.json").read_text())
    assert demo["meta"]["command"] == command(argv) and demo["meta"]["commit"] == git_commit()["commit"]
    assert demo["policies"]["mai"]["wall_s"] == 12.5
