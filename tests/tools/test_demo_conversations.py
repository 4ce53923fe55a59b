"""The demo models' follow-up and two-image examples: training forms only, answers read off what the
images show, the server's prompts with the images where they first appeared, and Stage 2 / transfer
targets that differ the way the one-image ones do."""

import random
import re
from collections import Counter
from dataclasses import replace

import pytest

from harness.easy_vqa import COLOURS, SHAPES, ImageFacts
from harness.multi_turn import HELD_OUT, PAIR_QUESTIONS
from serve_app.core.answers import extract_answer
from serve_app.core.prompts import PromptKind, Turn, build_messages
from training.demo.recipes import DEMO_LARGE, DEMO_SMALL
from training.demo_conversations import (
    IMAGE,
    answer,
    conversation_example,
    draw_record,
    rationale,
    reasoning_text,
    record_images,
)
from training.demo_data import DEMO_LAYOUT, PromptMix, prompt_answer_kind

# every colour and shape, three images each (easy-vqa has thousands of images of each)
FACTS = {
    index: ImageFacts(colour, shape)
    for index, (colour, shape) in enumerate((c, s) for c in COLOURS for s in SHAPES for _ in range(3))
}
IMAGES = sorted(FACTS)


def records(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [draw_record(FACTS, IMAGES, rng) for _ in range(count)]


def test_training_records_use_training_forms_only_and_both_kinds_about_half_and_half():
    drawn = records(2000)
    assert not {record["form"] for record in drawn} & HELD_OUT
    kinds = Counter(record["kind"].split("/")[0] for record in drawn)
    assert 0.4 < kinds["follow_up"] / len(drawn) < 0.6
    assert {record["kind"] for record in drawn} >= {f"images/{kind}" for kind in PAIR_QUESTIONS}


@pytest.mark.parametrize("kind", ["images/same_colour", "images/both_shape"])
def test_two_image_yes_no_questions_are_not_answered_by_their_text(kind):
    answers = Counter(record["answer"] for record in records(3000) if record["kind"] == kind)
    assert answers["yes"] / sum(answers.values()) > 0.3
    assert answers["no"] / sum(answers.values()) > 0.3


def test_the_reasoning_reaches_the_records_answer_from_what_the_images_show():
    for record in records(300, seed=1):
        truth = [FACTS[image] for image in record_images(record)]
        text = reasoning_text(record, truth)
        assert extract_answer(text) == record["answer"] == answer(record, truth)
        for facts in truth:
            assert facts.colour in rationale(record, truth)
            assert facts.shape in rationale(record, truth)


def test_a_pair_rationale_names_each_image_in_order_and_the_comparison():
    record = {"kind": "images/same_colour", "turns": [], "images": [0, 1], "asked": None}
    red, blue = ImageFacts("red", "circle"), ImageFacts("blue", "circle")
    text = reasoning_text(record, [red, blue])
    assert text.index("first shows a red circle") < text.index("second shows a blue circle")
    assert text.endswith("They differ. So the answer is no. [[no]]")
    assert reasoning_text(record, [red, red]).endswith("They match. So the answer is yes. [[yes]]")


def test_a_follow_up_carries_the_image_in_the_first_turn_and_asks_the_question_in_the_last():
    record = next(r for r in records(50) if r["turns"])
    example = conversation_example(record, FACTS, PromptKind.SIMPLE, random.Random(0), PromptMix(1, 0, 0, 0))
    first, reply, question = example.messages
    assert first["content"][0] == {"type": "image_url", "image_url": {"url": IMAGE}}
    assert reply == {"role": "assistant", "content": record["turns"][1]["text"]}
    assert all(part["type"] == "text" for part in question["content"])
    assert question["content"][0]["text"].startswith(record["question"])
    assert example.target == f"[[{record['answer']}]]"


@pytest.mark.parametrize("kind", [PromptKind.SIMPLE, PromptKind.REASONING])
def test_examples_are_the_servers_prompts_for_the_conversation(kind):
    for record in records(40, seed=2):
        example = conversation_example(record, FACTS, kind, random.Random(0), PromptMix(1, 1, 0, 0))
        context = [
            Turn(turn["role"], turn["text"], (IMAGE,) * len(turn["images"])) for turn in record["turns"]
        ]
        assert example.messages == build_messages(
            (IMAGE,) * len(record["images"]),
            record["question"],
            (),
            prompt_answer_kind(record["question"]),
            kind,
            layout=DEMO_LAYOUT,
            context=context,
        )


def test_stage2_reports_its_misreading_while_transfer_answers_the_truth():
    misread = PromptMix(0, 0, 1, 1, shape_error=1.0, colour_error=1.0)
    differed = 0
    for record in records(200, seed=3):
        stage2 = conversation_example(record, FACTS, PromptKind.STAGE2, random.Random(4), misread)
        transfer = conversation_example(record, FACTS, PromptKind.TRANSFER, random.Random(4), misread)
        [reached] = re.findall(r"So the answer is (\S+)\. \[\[", stage2.messages[-1]["content"][-1]["text"])
        assert stage2.target == f"[[{reached}]]"
        assert transfer.target == f"[[{record['answer']}]]"
        differed += reached != record["answer"]
    # every image misread: most Stage 2 targets are the misreading's answer, not the truth
    assert differed > 100


def test_record_images_are_in_prompt_order():
    follow = {"turns": [{"images": [7]}, {"images": []}], "images": []}
    pair = {"turns": [], "images": [3, 9]}
    assert record_images(follow) == [7]
    assert record_images(pair) == [3, 9]


@pytest.mark.parametrize(
    "shares",
    [
        {"conversation_share": -0.1},
        {"conversation_share": 1.0},
        {"phrased_share": 0.5, "conversation_share": 0.5},
    ],
)
def test_conversation_shares_are_checked(shares):
    with pytest.raises(ValueError, match="share"):
        replace(DEMO_SMALL, **shares)


def test_the_demo_recipes_train_on_conversations():
    assert DEMO_SMALL.conversation_share > 0 and DEMO_LARGE.conversation_share > 0
