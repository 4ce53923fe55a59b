"""Training examples of the demo models: facts read off easy-vqa's answers, grounded rationales, and
messages that are exactly the server's prompts."""

import random
from collections import defaultdict

import pytest

from serve_app.answers import extract_answer
from serve_app.prompts import TEMPLATES, TRANSFER_TEMPLATES, PromptKind, TransferForm
from training.demo_data import (
    QA,
    ImageFacts,
    PromptMix,
    answer_from_facts,
    facts_by_image,
    facts_from_answers,
    is_negated,
    make_example,
    perturbed,
    rationale,
    reasoning_text,
    tokenizer_corpus,
)

BLUE_CIRCLE = ImageFacts("blue", "circle")
MIX = PromptMix(simple=1, reasoning=1, stage2=1, transfer=1, shape_error=0.5, colour_error=0.5)


@pytest.fixture(scope="module")
def easy_vqa_train():
    import easy_vqa

    questions, answers, image_ids = easy_vqa.get_train_questions()
    return [QA(i, q, a) for q, a, i in zip(questions, answers, image_ids, strict=True)]


def test_facts_read_off_the_answers_reproduce_every_answer_of_the_image(easy_vqa_train):
    facts = facts_by_image(easy_vqa_train)
    assert len(facts) > 0.85 * len({qa.image_id for qa in easy_vqa_train})
    checked = [qa for qa in easy_vqa_train if qa.image_id in facts]
    wrong = [qa for qa in checked if answer_from_facts(facts[qa.image_id], qa.question) != qa.answer]
    assert not wrong and len(checked) > 30000


def test_facts_need_both_colour_and_shape():
    assert facts_from_answers([QA(0, "what color is the shape?", "red")]) is None
    assert facts_from_answers(
        [QA(0, "what color is the shape?", "red"), QA(0, "is there not a triangle?", "no")]
    ) == ImageFacts("red", "triangle")
    # "no" to a plain presence question says nothing about what is there.
    assert (
        facts_from_answers(
            [QA(0, "is there a green circle?", "no"), QA(0, "what shape is present?", "circle")]
        )
        is None
    )


@pytest.mark.parametrize(
    ("question", "negated"),
    [
        ("is there not a red shape?", True),
        ("does the image not contain a circle?", True),
        ("is no blue shape present?", True),
        ("is there a red shape?", False),
        ("what color is the shape?", False),
    ],
)
def test_negation(question, negated):
    assert is_negated(question) is negated


@pytest.mark.parametrize(
    ("question", "answer", "says"),
    [
        ("is there not a red shape?", "yes", "There is no red shape."),
        ("is there a blue shape in the image?", "yes", "There is a blue shape."),
        ("does the image contain a triangle?", "no", "There is no triangle."),
        ("what color is the circle?", "blue", "Its color is blue."),
        ("what shape is in the image?", "circle", "Its shape is a circle."),
    ],
)
def test_rationale_states_what_it_sees_then_the_fact_the_answer_turns_on(question, answer, says):
    assert rationale(BLUE_CIRCLE, question) == f"The image shows a blue circle. {says}"
    text = reasoning_text(BLUE_CIRCLE, question)
    assert extract_answer(text) == answer == answer_from_facts(BLUE_CIRCLE, question)


def test_perturbation_rates():
    rng = random.Random(0)
    assert perturbed(BLUE_CIRCLE, rng, shape_error=0, colour_error=0) == BLUE_CIRCLE
    wrong = perturbed(BLUE_CIRCLE, rng, shape_error=1, colour_error=1)
    assert wrong.colour != "blue" and wrong.shape != "circle"


@pytest.mark.parametrize(
    "kind", [PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.STAGE2, PromptKind.TRANSFER]
)
def test_examples_use_the_servers_prompts(kind):
    qa = QA(0, "is there not a red shape?", "yes")
    example = make_example("data:image/png;base64,AAAA", qa, BLUE_CIRCLE, kind, random.Random(1), MIX)
    [message] = example.messages
    image, question, instruction = message["content"]
    assert image["type"] == "image_url" and question["text"] == "Is there not a red shape?"
    # The instruction is the served template of that kind (for a transfer, of either form), with
    # the reasoning where the template takes one.
    served = (
        [TRANSFER_TEMPLATES[(form, "short")] for form in TransferForm]
        if kind is PromptKind.TRANSFER
        else [TEMPLATES[(kind, "short")]]
    )
    assert any(
        instruction["text"].startswith(template.split("{reasoning}")[0])
        and instruction["text"].endswith(template.split("{reasoning}")[-1])
        for template in served
    )
    if kind is PromptKind.SIMPLE:
        assert instruction["text"] == TEMPLATES[(PromptKind.SIMPLE, "short")] and example.target == "[[yes]]"


def test_stage2_reports_its_reasoning_while_transfer_answers_the_truth():
    qa = QA(0, "what shape is in the image?", "circle")
    rng = random.Random(3)
    stage2 = [make_example(None, qa, BLUE_CIRCLE, PromptKind.STAGE2, rng, MIX) for _ in range(40)]
    transfer = [make_example(None, qa, BLUE_CIRCLE, PromptKind.TRANSFER, rng, MIX) for _ in range(40)]
    for example in stage2:
        in_context = extract_answer(example.messages[0]["content"][-1]["text"].split("\n")[0])
        assert example.target == f"[[{in_context}]]"
    assert {example.target for example in stage2} > {"[[circle]]"}  # wrong reasoning gives wrong answers
    assert {example.target for example in transfer} == {"[[circle]]"}
    contexts = defaultdict(int)
    for example in transfer:
        contexts[
            "wrong" if "shows a blue circle" not in example.messages[0]["content"][-1]["text"] else "right"
        ] += 1
    assert contexts["wrong"] and contexts["right"]


def test_tokenizer_corpus_holds_every_template():
    corpus = tokenizer_corpus([QA(0, "what color is the shape?", "blue")], {0: BLUE_CIRCLE})
    assert all(template in corpus for template in TEMPLATES.values())
    assert "What color is the shape?" in corpus
