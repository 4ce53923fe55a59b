"""People's phrasings of easy-vqa's questions (harness.phrasings): every template's answer, the
held-out split, and a training corpus that never holds a held-out template."""

import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from harness.easy_vqa import COLOURS, QA, SHAPES, ImageFacts, answer_from_facts, facts_by_image
from harness.phrasings import (
    BY_NAME,
    FORMS,
    HELD_OUT,
    TEMPLATES,
    TRAINING,
    PhrasedQA,
    PhrasedQuestions,
    answer,
    answer_of,
    draw_slots,
    every_question,
    fill,
    phrased,
    slot_fills,
)
from serve_app.core.answers import extract_answer
from serve_app.core.question_parsing import either_or_choices
from training.demo import validation
from training.demo.corpus import Corpus, question_drawer
from training.demo.recipes import DEMO_LARGE, DEMO_SMALL
from training.demo_data import PromptMix, reading, reasoning_text, tokenizer_corpus

ROOT = Path(__file__).resolve().parents[2]
RED_CIRCLE = ImageFacts("red", "circle")
BLUE_TRIANGLE = ImageFacts("blue", "triangle")

# (question, what the image shows, the answer), written out by hand: at least one per template.
CASES = [
    ("Is the shape red?", RED_CIRCLE, "yes"),
    ("Is the shape brown?", RED_CIRCLE, "no"),
    ("Is it blue?", BLUE_TRIANGLE, "yes"),
    ("Is it red?", BLUE_TRIANGLE, "no"),
    ("Is the colour of the shape red?", RED_CIRCLE, "yes"),
    ("Does the shape look teal?", RED_CIRCLE, "no"),
    ("Is the shape not blue?", RED_CIRCLE, "yes"),
    ("Is the shape not red?", RED_CIRCLE, "no"),
    ("Is it a circle?", RED_CIRCLE, "yes"),
    ("Is it a circle?", BLUE_TRIANGLE, "no"),
    ("Is the shape a triangle?", BLUE_TRIANGLE, "yes"),
    ("Is this a rectangle?", RED_CIRCLE, "no"),
    ("Is it not a circle?", RED_CIRCLE, "no"),
    ("Is it not a circle?", BLUE_TRIANGLE, "yes"),
    # A contracted negative asks for confirmation: yes when it is one.
    ("Isn't it a triangle?", BLUE_TRIANGLE, "yes"),
    ("Isn't it a triangle?", RED_CIRCLE, "no"),
    ("Is this a red circle?", RED_CIRCLE, "yes"),
    ("Is this a red triangle?", RED_CIRCLE, "no"),
    ("Is this a blue circle?", RED_CIRCLE, "no"),
    ("Is the shape coloured red?", RED_CIRCLE, "yes"),
    ("Isn't the shape blue?", RED_CIRCLE, "no"),
    ("Isn't the shape blue?", BLUE_TRIANGLE, "yes"),
    ("Is the shape not a circle?", RED_CIRCLE, "no"),
    ("Is the shape not a circle?", BLUE_TRIANGLE, "yes"),
    ("Do you see a blue triangle?", BLUE_TRIANGLE, "yes"),
    ("Do you see a blue circle?", BLUE_TRIANGLE, "no"),
    ("What colour is the shape?", RED_CIRCLE, "red"),
    ("What color is it?", BLUE_TRIANGLE, "blue"),
    ("Which colour is the shape?", RED_CIRCLE, "red"),
    ("What colour is the triangle?", BLUE_TRIANGLE, "blue"),
    ("What is the colour of this shape?", RED_CIRCLE, "red"),
    ("What's the color of the shape?", BLUE_TRIANGLE, "blue"),
    ("Tell me the colour of the circle.", RED_CIRCLE, "red"),
    ("Which color is the shape in the image?", RED_CIRCLE, "red"),
    ("Which shape is it?", RED_CIRCLE, "circle"),
    ("What shape is this?", BLUE_TRIANGLE, "triangle"),
    ("What kind of shape is it?", RED_CIRCLE, "circle"),
    ("Which shape is shown?", BLUE_TRIANGLE, "triangle"),
    ("Which shape is blue?", BLUE_TRIANGLE, "triangle"),
    ("Name the shape.", RED_CIRCLE, "circle"),
    ("What type of shape is shown?", BLUE_TRIANGLE, "triangle"),
    ("What's the shape in the picture?", RED_CIRCLE, "circle"),
    ("Is the shape red or brown?", RED_CIRCLE, "red"),
    ("Is the shape brown or red?", RED_CIRCLE, "red"),
    ("Is it green or blue?", BLUE_TRIANGLE, "blue"),
    ("Is the colour red or blue?", BLUE_TRIANGLE, "blue"),
    ("Is it a circle or a triangle?", BLUE_TRIANGLE, "triangle"),
    ("Is the shape a rectangle or a circle?", RED_CIRCLE, "circle"),
    ("Is the shape coloured gray or red?", RED_CIRCLE, "red"),
    ("Is this a triangle or a rectangle?", BLUE_TRIANGLE, "triangle"),
    ("Is the shape in the image a circle or a rectangle?", RED_CIRCLE, "circle"),
    ("How many shapes are there?", RED_CIRCLE, "1"),
    ("How many shapes are in the image?", BLUE_TRIANGLE, "1"),
    ("How many shapes do you see?", RED_CIRCLE, "1"),
    ("What is the number of shapes in the image?", RED_CIRCLE, "1"),
    ("How many objects are in the picture?", BLUE_TRIANGLE, "1"),
    ("Count the shapes.", RED_CIRCLE, "1"),
]
# The questions a new user typed and got non-answers to: each one a training template asks.
REPORTED = (
    "Is the shape red?",
    "Is the shape not blue?",
    "Is the shape red or brown?",
    "How many shapes are there?",
)


def asked_by(question: str) -> list[tuple[str, dict[str, str]]]:
    """(template name, slots) of every template fill that asks ``question``."""
    return [(t.name, s) for t in TEMPLATES for s in slot_fills(t) if fill(t, s) == question]


def typed(question: str) -> str:
    """A question as the demo tokenizer sees it (its normalizer: lower case, no "?", spaces collapsed)."""
    return " ".join(question.lower().replace("?", "").split())


@pytest.mark.parametrize(("question", "facts", "expected"), CASES)
def test_every_templates_answer_is_the_images(question, facts, expected):
    [(name, slots)] = asked_by(question)
    assert answer(BY_NAME[name], facts, slots) == expected
    if not BY_NAME[name].held_out:  # the training rationales read the text the same way
        assert answer_of(facts, question) == expected


def test_the_cases_cover_every_template():
    covered = {name for question, _, _ in CASES for name, _ in asked_by(question)}
    assert covered == set(BY_NAME)


def test_a_question_whose_premise_the_image_contradicts_has_no_answer():
    with pytest.raises(ValueError, match="neither option"):
        answer(BY_NAME["either-or-shape-colours"], RED_CIRCLE, {"a": "blue", "b": "brown"})
    with pytest.raises(ValueError, match="not triangle"):
        answer(BY_NAME["colour-of-the-named-shape"], RED_CIRCLE, {"shape": "triangle"})
    assert answer_of(RED_CIRCLE, "Is the shape blue or brown?") is None


@pytest.mark.parametrize("template", TRAINING, ids=lambda t: t.name)
def test_training_rationales_reach_every_training_templates_answer(template):
    """What the training targets read off a question (answer_of, the rationale) is the template's
    answer, for every image and every question the template can ask."""
    for colour in COLOURS:
        for shape in SHAPES:
            facts = ImageFacts(colour, shape)
            for slots in slot_fills(template):
                try:
                    truth = answer(template, facts, slots)
                except ValueError:
                    continue  # a premise this image contradicts: never asked about it
                question = fill(template, slots)
                assert answer_of(facts, question) == truth, question
                assert extract_answer(reasoning_text(facts, question)) == truth, question


def test_answer_of_reads_easy_vqas_own_questions_as_before():
    import easy_vqa

    questions, answers, image_ids = easy_vqa.get_train_questions()
    qas = [QA(i, q, a) for q, a, i in zip(questions, answers, image_ids, strict=True)]
    facts = facts_by_image(qas)
    checked = [qa for qa in qas if qa.image_id in facts]
    assert len(checked) > 30000
    assert all(answer_of(facts[qa.image_id], qa.question) == qa.answer for qa in checked)
    assert all(
        answer_of(facts[qa.image_id], qa.question) == answer_from_facts(facts[qa.image_id], qa.question)
        for qa in checked[:2000]
    )


def test_either_or_questions_name_options_the_server_reads():
    for template in (t for t in TEMPLATES if t.form == "either_or"):
        for slots in slot_fills(template):
            assert either_or_choices(fill(template, slots)) == (slots["a"], slots["b"]), template.name


def test_the_split_is_declared_disjoint_and_covers_every_form():
    assert len(BY_NAME) == len(TEMPLATES)  # names are unique
    assert set(TRAINING).isdisjoint(HELD_OUT) and set(TRAINING) | set(HELD_OUT) == set(TEMPLATES)
    for form in FORMS:
        held = [t for t in HELD_OUT if t.form == form]
        trained = [t for t in TRAINING if t.form == form]
        assert 2 <= len(held) <= len(trained), form


def test_held_out_questions_are_asked_nowhere_else():
    """No held-out question reads (as the tokenizer sees it) like a training template's or one of
    easy-vqa's own, which the models also train on; the reported questions are training ones."""
    import easy_vqa

    held = {typed(q) for t in HELD_OUT for q in every_question(t)}
    trained = {typed(q) for t in TRAINING for q in every_question(t)}
    easy = {typed(q) for q in easy_vqa.get_train_questions()[0]}
    assert held.isdisjoint(trained) and held.isdisjoint(easy) and trained.isdisjoint(easy)
    assert all(typed(question) in trained for question in REPORTED)


# Images showing every colour and shape alike (each of the 24 pairs ten times).
EVEN = {i: ImageFacts(COLOURS[i % 8], SHAPES[i % 3]) for i in range(240)}


def test_drawn_questions_cover_every_form_and_are_seeded():
    questions = PhrasedQuestions(EVEN, EVEN, TEMPLATES)
    rng = random.Random(2)
    drawn = [questions.draw(rng) for _ in range(3000)]
    forms = Counter(qa.form for qa in drawn)
    assert set(forms) == set(FORMS) and min(forms.values()) > 3000 / len(FORMS) * 0.8  # forms uniform
    assert all(qa.answer == answer_of(EVEN[qa.image_id], qa.question) for qa in drawn if not qa.held_out)
    assert {qa.held_out for qa in drawn} == {True, False}
    again = random.Random(2)
    assert [questions.draw(again) for _ in range(50)] == drawn[:50]  # seeded: the same draw
    only_training = PhrasedQuestions(EVEN, EVEN, TRAINING)
    assert not any(only_training.draw(again).held_out for _ in range(2000))


@pytest.mark.parametrize(
    "name",
    [
        "yes-no-shape-is-colour",
        "yes-no-it-not-a-shape",
        "yes-no-this-is-a-colour-shape",
        "either-or-shape-colours",
        "either-or-it-shapes",
    ],
)
def test_the_question_text_alone_gets_about_half_right(name):
    """Per question text, the answers are balanced: its majority answer is right about half the time."""
    rng = random.Random(0)
    images = sorted(EVEN)
    drawn = [phrased(BY_NAME[name], image, EVEN[image], rng) for image in rng.choices(images, k=20000)]
    by_text: dict[str, Counter] = {}
    for qa in drawn:
        by_text.setdefault(qa.question, Counter())[qa.answer] += 1
    assert 0.5 <= sum(max(answers.values()) for answers in by_text.values()) / len(drawn) < 0.56
    if BY_NAME[name].form == "yes_no":
        assert 0.47 < sum(qa.answer == "yes" for qa in drawn) / len(drawn) < 0.53


def test_slots_name_what_the_image_shows_where_the_question_does_not_ask():
    rng = random.Random(0)
    for _ in range(200):
        assert draw_slots(BY_NAME["colour-of-the-named-shape"], BLUE_TRIANGLE, rng) == {"shape": "triangle"}
        options = draw_slots(BY_NAME["either-or-it-shapes"], BLUE_TRIANGLE, rng)
        assert "triangle" in options.values() and options["a"] != options["b"]
    qa = phrased(BY_NAME["count-how-many"], 7, RED_CIRCLE, rng)
    assert qa == PhrasedQA(7, "How many shapes are there?", "1", "count-how-many", "count", False)


def corpus_of_easy_vqa() -> Corpus:
    import easy_vqa

    questions, answers, image_ids = easy_vqa.get_train_questions()
    qas = [QA(i, q, a) for q, a, i in zip(questions, answers, image_ids, strict=True) if i < 600]
    return Corpus(train=qas, validation=[], facts=facts_by_image(qas), pixels={}, grid=None)


def test_the_training_corpus_never_holds_a_held_out_template():
    corpus = corpus_of_easy_vqa()
    held = {typed(q) for t in HELD_OUT for q in every_question(t)}
    for spec in (DEMO_SMALL, DEMO_LARGE):
        assert spec.phrased_share > 0  # the next training asks people's phrasings
        draw = question_drawer(corpus, replace(spec, batch_size=500), random.Random(0))
        questions = [qa for _ in range(8) for qa in draw()]
        phrased_qas = [qa for qa in questions if isinstance(qa, PhrasedQA)]
        # follow-ups and two-image questions (records) take conversation_share first
        expected = spec.phrased_share * (1 - spec.conversation_share)
        assert abs(len(phrased_qas) / len(questions) - expected) < 0.03
        assert {qa.form for qa in phrased_qas} == set(FORMS)
        assert not any(qa.held_out for qa in phrased_qas)
        texts = {typed(qa["question"] if isinstance(qa, dict) else qa.question) for qa in questions}
        assert not texts & held
    lines = "\n".join(typed(line) for line in tokenizer_corpus(corpus.train[:500], corpus.facts))
    assert not [question for question in held if question in lines]
    assert "is the shape not blue" in lines  # the training phrasings are there


def test_without_a_phrased_share_the_draw_is_easy_vqas_alone():
    corpus = corpus_of_easy_vqa()
    spec = replace(DEMO_SMALL, phrased_share=0.0, batch_size=300)
    questions = question_drawer(corpus, spec, random.Random(0))()
    assert not any(isinstance(qa, PhrasedQA) for qa in questions)
    with pytest.raises(ValueError, match="phrased_share"):
        replace(DEMO_SMALL, phrased_share=1.0)


def test_a_misread_either_or_reads_the_other_option():
    question = "Is the shape red or brown?"
    always_wrong = PromptMix(1, 0, 0, 0, shape_error=1, colour_error=1)
    rng = random.Random(0)
    for _ in range(50):
        seen = reading(RED_CIRCLE, question, rng, always_wrong)
        assert seen.colour == "brown" and seen.shape != "circle"
        assert answer_of(seen, question) == "brown"


def test_the_docs_name_the_held_out_templates():
    text = (ROOT / "docs" / "demo-models.md").read_text()
    section = text.split("## Phrasings", 1)[1].split("\n## ", 1)[0]
    [held_line] = [paragraph for paragraph in section.split("\n\n") if paragraph.startswith("Held out")]
    named = {" ".join(text.split()) for text in re.findall(r"`([^`]+)`", held_line)}
    assert named == {t.text for t in HELD_OUT}


def test_phrased_accuracy_reports_seen_and_held_out_templates_by_form(monkeypatch):
    facts = {i: ImageFacts(COLOURS[i % 8], SHAPES[i % 3]) for i in range(24)}
    corpus = Corpus(train=[], validation=[], facts=facts, pixels={}, grid=None)
    rng = random.Random(0)
    qas = [phrased(template, i, facts[i], rng) for template in TEMPLATES for i in range(3)]
    asked = []

    def right_on_colour_and_count(model, corpus, collator, chunk, examples):
        asked.extend(examples)
        return [qa.form in ("colour", "count") for qa in chunk]

    monkeypatch.setattr(validation, "greedy_matches", right_on_colour_and_count)
    model = type("Model", (), {"eval": lambda self: self, "train": lambda self: self})()
    report = validation.phrased_accuracy(model, corpus, None, qas, batch_size=16)
    assert [example.target for example in asked] == [f"[[{qa.answer}]]" for qa in qas]  # Simple prompts
    for part, held_out in (("seen", False), ("held out", True)):
        forms = {qa.form for qa in qas if qa.held_out is held_out}
        assert set(report[part]) == forms | {"all"}
        assert all(report[part][form] == float(form in ("colour", "count")) for form in forms)
        share = [qa.form in ("colour", "count") for qa in qas if qa.held_out is held_out]
        assert report[part]["all"] == round(sum(share) / len(share), 3)


def test_the_consoles_forms_are_ones_the_demo_models_learnt_one_of_each_form_at_least():
    """The playground's question forms (serve_app/console/examples/examples.json) are training
    templates filled in, never a held-out one, each offered as the form it is."""
    import json

    path = Path(__file__).resolve().parents[2] / "serve_app/console/examples/examples.json"
    forms = json.loads(path.read_text())["forms"]
    learnt = {question: t.form for t in TRAINING for question in every_question(t)}
    held_out = {question for t in HELD_OUT for question in every_question(t)}
    for form in forms:
        assert form["question"] not in held_out, form
        assert learnt.get(form["question"]) == form["form"], form
    assert {form["form"] for form in forms} == set(FORMS)
