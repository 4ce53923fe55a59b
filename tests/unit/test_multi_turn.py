"""The follow-up and two-image questions the conversations bench asks: answers true to the images'
facts, held-out phrasings apart, and messages the cascade takes."""

from __future__ import annotations

import random

from harness.easy_vqa import COLOURS, SHAPES, ImageFacts
from harness.multi_turn import FORMS, HELD_OUT, chat_messages, draw, follow_up, image_pair
from serve_app.config import AppConfig
from serve_app.edge.routing import ToCascade, destination, destination_reasons

FACTS = {
    1: ImageFacts("red", "circle"),
    2: ImageFacts("red", "triangle"),
    3: ImageFacts("blue", "circle"),
    4: ImageFacts("green", "rectangle"),
}
TWO = {"engine_kwargs": {"limit_mm_per_prompt": {"image": 2}}}
CONFIG = AppConfig.model_validate(
    {
        "small": {"model_id": "s", "source": "org/s"} | TWO,
        "large": {"model_id": "l", "source": "org/l"} | TWO,
        "limits": {"max_images": 2},
    }
)


def test_a_follow_up_answers_truly_about_the_image_of_its_first_turn():
    rng = random.Random(3)
    for _ in range(50):
        record = follow_up(FACTS[1], 1, rng)
        first, said = record["turns"]
        assert first["images"] == [1] and said["text"] in ("red", "circle") and record["images"] == []
        question, answer = record["question"], record["answer"]
        if record["metric"] == "yes_no":
            asked = next(word for word in (*COLOURS, *SHAPES) if word in question)
            assert answer == ("yes" if asked in ("red", "circle") else "no")
        else:
            assert answer in ("red", "circle")


def test_a_pair_question_reads_both_images():
    rng = random.Random(5)
    seen = set()
    for _ in range(100):
        record = image_pair(FACTS, 1, 3, rng)
        seen.add(record["kind"])
        if record["kind"] == "images/same_colour":
            assert record["answer"] == "no"
        elif record["kind"] == "images/count_colour":
            assert record["answer"] == (
                "1" if "red" in record["question"] or "blue" in record["question"] else "0"
            )
        else:
            assert record["answer"] == ("yes" if "circle" in record["question"] else "no")
    assert seen == {"images/same_colour", "images/count_colour", "images/both_shape"}


def test_held_out_forms_are_apart_and_drawn_when_asked():
    held = draw(FACTS, sorted(FACTS), 3, held_out=True)
    seen = draw(FACTS, sorted(FACTS), 3, held_out=False)
    assert all(r["form"] in HELD_OUT for r in held["follow_up"] + held["images"])
    assert not any(r["form"] in HELD_OUT for r in seen["follow_up"] + seen["images"])
    assert all(any(form not in HELD_OUT for form in forms) for forms in FORMS.values())
    assert draw(FACTS, sorted(FACTS), 3) == held  # seeded


def test_the_records_messages_run_the_cascade():
    drawn = draw(FACTS, sorted(FACTS), 2)
    urls = {image: f"data:image/png;base64,{image}" for image in FACTS}
    for kind, records in drawn.items():
        for record in records:
            routed = destination(
                {"model": "mai", "messages": chat_messages(record, urls.__getitem__)}, CONFIG
            )
            assert isinstance(routed, ToCascade), routed
            assert destination_reasons(routed) == (
                "cascade",
                ("follow_up" if kind == "follow_up" else "images",),
            )
