"""The demo evaluation's own figures: the question-only baseline, accuracy by question type, and what
reasoning transfer did on the escalated questions."""

from evaluation.demo_eval import accuracy_by_type, question_prior, question_type, render, transfer_effect

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


def test_accuracy_by_type():
    records = [
        {"id": "a", "question": "Is it?", "answer": "yes"},
        {"id": "b", "question": "What color?", "answer": "red"},
        {"id": "c", "question": "What shape?", "answer": "circle"},
        {"id": "d", "question": "Is it?", "answer": "no"},
    ]
    accuracy = accuracy_by_type(records, {"a": True, "b": True, "c": False})
    assert accuracy == {"all": 0.5, "color": 1.0, "shape": 0.0, "yes/no": 0.5}


def test_transfer_effect_compares_the_same_questions():
    mai = {
        "a": {"status": 200, "route": "transfer", "score": 1.0},
        "b": {"status": 200, "route": "transfer", "score": 1.0},
        "c": {"status": 200, "route": "agree_short", "score": 0.0},
        "d": {"status": 503, "route": "transfer"},
    }
    large = {
        "a": {"status": 200, "score": 0.0},
        "b": {"status": 200, "score": 1.0},
        "c": {"status": 200, "score": 1.0},
    }
    assert transfer_effect(mai, large) == {
        "questions": 2,
        "large_simple_accuracy": 0.5,
        "after_transfer_accuracy": 1.0,
    }
    assert transfer_effect({}, large) == {"questions": 0}


def test_render_puts_the_baseline_next_to_every_policy():
    row = {
        "accuracy": {"all": 0.8, "yes/no": 0.9, "color": 0.95, "shape": 0.4},
        "accuracy_95ci": [71.0, 88.5],
        "route_shares": {"agree_short": 0.75, "transfer": 0.25},
        "tokens": {"small": 5.0, "large": 3.0},
        "p50_s": 0.1,
        "wall_s": 12.0,
        "errors": 0,
    }
    summary = {
        "records": 4,
        "concurrency": 8,
        "question_prior": {"all": 0.6, "yes/no": 0.7},
        "policies": {"mai": row, "mai-small": row},
        "transfer_effect": {"questions": 3, "large_simple_accuracy": 0.0, "after_transfer_accuracy": 2 / 3},
    }
    table = render(summary)
    lines = table.splitlines()
    assert "| question only (no image) | 60.0 | – | 70.0 | – | – |" in table
    assert "| mai | 80.0 | 71.0–88.5 | 90.0 |" in table
    assert lines.index(next(line for line in lines if line.startswith("| mai-small "))) < lines.index(
        next(line for line in lines if line.startswith("| mai "))
    )
    assert "agree_short 75%, transfer 25%" in table and "on the 3 questions" in table and "66.7 %" in table
