"""The demo evaluation's own figures, from the compact predictions it commits: the question-only
baseline, accuracy by question type and on the balanced yes/no set, the typed forms beside the display
form, and what reasoning transfer did on the escalated questions."""

import pytest

from evaluation.demo_eval import (
    accuracy_by_type,
    build_summary,
    compact_rows,
    question_prior,
    question_type,
    render,
    transfer_effect,
    typed_records,
    write_tables,
)

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
    written = write_tables(tmp_path, META, rows)
    assert written == (tmp_path / "demo.md").read_text()
    assert [line for line in written.splitlines() if line.startswith("| mai")] == [
        line for line in lines if line.startswith("| mai")
    ]


@pytest.mark.parametrize("fresh", [False, True])
def test_calibrate_passes_fresh_on_to_mai_eval(tmp_path, monkeypatch, fresh):
    import evaluation.cli
    import evaluation.demo_eval as demo_eval

    monkeypatch.setattr(demo_eval, "DATASETS", tmp_path)
    (tmp_path / "easy-vqa-validation-10-balanced-5.jsonl").write_text("{}\n")
    calls = []
    monkeypatch.setattr(evaluation.cli, "main", lambda argv: calls.append(argv) or 0)
    argv = ["--calibrate", "--calibration-questions", "10", "--url", "http://server", "--out", str(tmp_path)]
    assert demo_eval.main(argv + (["--fresh"] if fresh else [])) == 0
    [call] = calls
    assert call[:2] == ["calibrate", str(tmp_path / "easy-vqa-validation-10-balanced-5.jsonl")]
    assert ("--fresh" in call) is fresh
    assert call[call.index("--url") + 1] == "http://server"
