"""Training examples of the demo models: facts read off easy-vqa's answers, grounded rationales, and
messages that are exactly the server's prompts."""

import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

from harness.easy_vqa import (
    COLOURS,
    QA,
    YES_NO_FORMS,
    BalancedYesNo,
    ImageFacts,
    answer_from_facts,
    balanced_yes_no,
    draw_validation_images,
    facts_by_image,
    facts_from_answers,
    held_out_images,
    is_negated,
    question_variant,
)
from harness.local_server import config_args
from serve_app.core.answers import extract_answer
from serve_app.core.prompts import (
    LAYOUT_SEPARATORS,
    TEMPLATES,
    TRANSFER_TEMPLATES,
    PromptKind,
    PromptLayout,
    TransferForm,
    build_messages,
)
from training.demo_data import (
    DEMO_LAYOUT,
    PromptMix,
    comparison_drill,
    comparison_step,
    make_example,
    misreading,
    perturbed,
    prompt_answer_kind,
    rationale,
    reasoning_text,
    tokenizer_corpus,
)

ROOT = Path(__file__).resolve().parents[2]
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
        ("is there not a red shape?", "yes", "no red shape. The question says not, so yes is right."),
        (
            "is there a blue shape in the image?",
            "yes",
            "asks if there is a blue shape. It asks about blue; the image shows blue. They match, so there "
            "is a blue shape.",
        ),
        (
            "does the image contain a triangle?",
            "no",
            "It asks about triangle; the image shows circle. They differ, so there is no triangle.",
        ),
        (
            "is no circle present?",
            "no",
            "They match, so there is a circle. The question says not, so no is right.",
        ),
        ("what color is the circle?", "blue", "The question asks for the color."),
        ("what shape is in the image?", "circle", "The question asks for the shape."),
    ],
)
def test_reasoning_walks_from_what_it_sees_to_the_answer(question, answer, says):
    steps = rationale(BLUE_CIRCLE, question)
    assert steps.startswith("I look at the image. I see one shape. Its color is blue. It has no corners")
    assert steps.endswith(says)
    text = reasoning_text(BLUE_CIRCLE, question)
    assert extract_answer(text) == answer == answer_from_facts(BLUE_CIRCLE, question)
    assert text.endswith(f"So the answer is {answer}. [[{answer}]]")


def test_the_drill_is_the_rationales_comparison_step_with_its_verdict_balanced():
    rng = random.Random(0)
    verdicts = defaultdict(int)
    for _ in range(2000):
        prefix, sentence = comparison_drill(rng)
        assert sentence.startswith(prefix) and prefix.endswith(". They")
        asked, shown = (part.split()[-1] for part in prefix.removesuffix(". They").split(";"))
        verdict = sentence[len(prefix) :].split(",")[0].strip()
        assert verdict == ("match" if asked == shown else "differ")
        assert (asked in COLOURS) == (shown in COLOURS)
        verdicts[verdict, asked in COLOURS] += 1
    assert all(400 < count < 600 for count in verdicts.values()) and len(verdicts) == 4
    assert comparison_step("red", "gray", "red shape") in rationale(
        ImageFacts("gray", "circle"), "is there a red shape?"
    )


def test_generated_yes_no_questions_are_balanced_per_form_and_named_attribute(easy_vqa_train):
    facts = facts_by_image(easy_vqa_train)
    rng = random.Random(0)
    questions = BalancedYesNo(facts, facts)
    drawn = [questions.draw(rng) for _ in range(16000)]
    assert balanced_yes_no(facts, sorted(facts), random.Random(0)) == BalancedYesNo(facts, facts).draw(
        random.Random(0)
    )
    by_text: dict[str, list[str]] = defaultdict(list)
    for qa in drawn:
        assert qa.answer == answer_from_facts(facts[qa.image_id], qa.question)
        by_text[qa.question].append(qa.answer)
    assert len(by_text) == len(YES_NO_FORMS) * (8 + 3)  # every form with every colour and every shape
    # The question alone: the majority answer of its text gets about half right.
    prior = sum(max(a.count("yes"), a.count("no")) for a in by_text.values()) / len(drawn)
    assert 0.5 <= prior < 0.56
    easy_vqa_yes_no = defaultdict(list)
    for qa in easy_vqa_train:
        if qa.answer in ("yes", "no"):
            easy_vqa_yes_no[qa.question].append(qa.answer)
    total = sum(map(len, easy_vqa_yes_no.values()))
    assert sum(max(a.count("yes"), a.count("no")) for a in easy_vqa_yes_no.values()) / total > 0.75


def test_questions_are_written_the_ways_clients_type_them():
    rng = random.Random(0)
    variants = {question_variant("is there not a red shape?", rng) for _ in range(300)}
    assert "is there not a red shape?" in variants and "Is there not a red shape?" in variants
    assert "IS THERE NOT A RED SHAPE?" in variants and any(not v.endswith("?") for v in variants)
    assert any("  " in v for v in variants)
    assert {" ".join(v.lower().rstrip("?").split()).rstrip(" ?") for v in variants} == {
        "is there not a red shape"
    }


def test_the_validation_images_are_the_committed_seeded_draw(easy_vqa_train):
    image_ids = [qa.image_id for qa in easy_vqa_train]
    assert held_out_images(image_ids) == set(draw_validation_images(image_ids))
    assert len(held_out_images()) == 400


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
    image, text = message["content"]
    # The question, then the instruction, joined as the demo models' layout says.
    question, separator = "Is there not a red shape?", LAYOUT_SEPARATORS[DEMO_LAYOUT]
    assert image["type"] == "image_url" and text["text"].startswith(question + separator)
    instruction = {"text": text["text"].removeprefix(question + separator)}
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


def test_the_training_uses_the_papers_layout():
    assert DEMO_LAYOUT is PromptLayout.SEPARATE_LINE


@pytest.mark.parametrize("config", ["mai-cpu.yaml", "mai-cpu-mixed.yaml"])
def test_the_cpu_configs_declare_the_layout_each_demo_checkpoint_learnt(config):
    """A CPU config's prompt_layout for each demo model is the one its training report names."""
    args = config_args(config)
    checked = 0
    for role in ("small", "large"):
        report_path = ROOT / args[role]["source"] / "mai-demo.json"
        if not report_path.exists():  # not a demo model (the mixed pair's Gemma 3)
            continue
        report = json.loads(report_path.read_text())
        assert args[role].get("prompt_layout", "separate_line") == report["prompt_layout"], role
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("Is the shape red or brown?", "text"),  # the options named: asked as it is, short answer
        ("Is it a circle or a triangle?", "text"),
        ("How many shapes are there?", "number"),
        ("Is the shape not blue?", "yes_no"),
        ("What colour is the shape?", "text"),
    ],
)
def test_phrased_questions_get_the_servers_prompts(question, kind):
    assert prompt_answer_kind(question) == kind
    qa = QA(0, question, "x")
    example = make_example("data:,", qa, BLUE_CIRCLE, PromptKind.SIMPLE, random.Random(0), MIX)
    assert example.messages == build_messages(
        ["data:,"], question, (), kind, PromptKind.SIMPLE, layout=DEMO_LAYOUT
    )
    assert example.messages[0]["content"][-1]["text"].endswith(TEMPLATES[(PromptKind.SIMPLE, "short")])


@pytest.mark.parametrize(
    ("question", "says", "answer"),
    [
        (
            "Is the shape red or blue?",
            "The question asks if it is red or blue. The image shows blue.",
            "blue",
        ),
        (
            "Is it a circle or a triangle?",
            "The question asks if it is a circle or a triangle. The image shows circle.",
            "circle",
        ),
        ("How many shapes are there?", "The question asks how many shapes there are.", "1"),
        ("Isn't it a circle?", "They match, so there is a circle.", "yes"),
        ("Is the shape not blue?", "The question says not, so no is right.", "no"),
    ],
)
def test_reasoning_about_phrased_questions(question, says, answer):
    assert rationale(BLUE_CIRCLE, question).endswith(says)
    assert reasoning_text(BLUE_CIRCLE, question).endswith(f"So the answer is {answer}. [[{answer}]]")


def test_reasoning_refuses_a_question_the_image_cannot_answer():
    with pytest.raises(ValueError, match="does not answer"):
        reasoning_text(BLUE_CIRCLE, "Is the shape red or green?")


def test_stage2_reports_its_reasoning_while_transfer_answers_the_truth():
    qa = QA(0, "what shape is in the image?", "circle")
    rng = random.Random(3)
    stage2 = [make_example(None, qa, BLUE_CIRCLE, PromptKind.STAGE2, rng, MIX) for _ in range(40)]
    transfer = [make_example(None, qa, BLUE_CIRCLE, PromptKind.TRANSFER, rng, MIX) for _ in range(40)]
    asked = "What shape is in the image?" + LAYOUT_SEPARATORS[DEMO_LAYOUT]
    for example in stage2:
        # After the question: "According to previous thinking: <reasoning>", then the instruction.
        text = example.messages[0]["content"][-1]["text"]
        in_context = extract_answer(text.removeprefix(asked).split("\n")[0])
        assert text.startswith(asked) and example.target == f"[[{in_context}]]"
    assert {example.target for example in stage2} > {"[[circle]]"}  # wrong reasoning gives wrong answers
    assert {example.target for example in transfer} == {"[[circle]]"}
    contexts = defaultdict(int)
    for example in transfer:
        contexts[
            "right" if "is blue. It has no corners" in example.messages[0]["content"][-1]["text"] else "wrong"
        ] += 1
    assert contexts["wrong"] and contexts["right"]


@pytest.mark.parametrize(
    "question",
    [
        "what color is the shape?",
        "what shape is in the image?",
        "is there a red shape?",
        "is there not a circle?",
        "is no blue shape present?",
    ],
)
def test_a_misreading_answers_the_question_wrongly(question):
    rng = random.Random(0)
    readings = {misreading(BLUE_CIRCLE, question, rng) for _ in range(60)}
    truth = answer_from_facts(BLUE_CIRCLE, question)
    assert all(answer_from_facts(seen, question) != truth for seen in readings)
    assert len(readings) > 1  # drawn among the wrong readings, not always the same one


def test_a_misreading_of_a_question_the_image_cannot_answer_is_an_error():
    with pytest.raises(ValueError, match="no reading"):
        misreading(BLUE_CIRCLE, "is it daytime?", random.Random(0))


def test_tokenizer_corpus_holds_every_template():
    corpus = tokenizer_corpus([QA(0, "what color is the shape?", "blue")], {0: BLUE_CIRCLE})
    assert all(template in corpus for template in TEMPLATES.values())
    assert "What color is the shape?" in corpus
