"""lmms-eval's own question texts (its ``doc_to_text`` for the paper's six datasets, vendored verbatim in
tests/lmms_eval_prompts.py) read as the paper reads them: the bare question, its options, its kind, and
the harness's answer-format instruction recognised, for every prompt variant the tasks' YAML files hold."""

import asyncio
import math
from pathlib import Path

import pytest

from harness.multi_turn import PAIR_QUESTIONS
from serve_app.core.cascade import Cascade
from serve_app.core.prompts import CHOICE, SHORT, TEMPLATES, PromptKind
from serve_app.core.question_parsing import parse_question, read_question
from tests import lmms_eval_prompts as lmms

from ..images import chat_body
from .build import chat_job
from .fakes import ScriptedVLM
from .test_api import CONFIG

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER


def kwargs(task_yaml: dict, variant: str = "default") -> dict:
    return task_yaml["lmms_eval_specific_kwargs"][variant]


def read(text: str) -> tuple[str, tuple[str, ...], str | None, str | None]:
    parsed, question = parse_question(text), read_question(text)
    form = parsed.instruction.form if parsed.instruction else None
    return parsed.text, parsed.choices, question.kind, form


POPE_DOC = {"question": " Is there a dog in the image? ", "answer": "no", "question_id": "1"}


@pytest.mark.parametrize(("variant", "form"), [("default", "single_word_or_phrase"), ("plm", "concise")])
def test_pope(variant, form):
    text = lmms.pope_doc_to_text(POPE_DOC, kwargs(lmms.POPE_YAML, variant))
    assert read(text) == ("Is there a dog in the image?", (), "yes_no", form)


def test_pope_without_its_post_prompt_is_the_bare_question():
    text = lmms.pope_doc_to_text(POPE_DOC, {"pre_prompt": "", "post_prompt": ""})
    assert read(text) == ("Is there a dog in the image?", (), "yes_no", None)


@pytest.mark.parametrize(("variant", "form"), [("default", "single_word"), ("qwen_vl", "answer_cue")])
def test_chartqa(variant, form):
    doc = {"question": "How many food item is shown in the bar graph?", "answer": "14", "type": "human_test"}
    text = lmms.chartqa_doc_to_text(doc, kwargs(lmms.CHARTQA_YAML, variant))
    assert read(text) == ("How many food item is shown in the bar graph?", (), "number", form)


def test_infovqa():
    doc = {"question": "Which social platform has heavy female audience?", "answers": ["pinterest"]}
    text = lmms.infovqa_doc_to_text(doc, kwargs(lmms.INFOVQA_YAML))
    assert read(text) == (
        "Which social platform has heavy female audience?",
        (),
        "text",
        "single_word_or_phrase",
    )


def mmbench_doc(hint, **options):
    return {
        "question": "Which of these states is farthest north?",
        "answer": "A",
        "category": "geography",
        "L2-category": "reasoning",
        "index": 7,
        "hint": hint,
        "source": "scienceqa",
        "split": "dev",
        "A": "West Virginia",
        "B": "Louisiana",
        "C": "Arizona",
        "D": "Oklahoma",
        **options,
    }


@pytest.mark.parametrize(
    ("hint", "question"),
    [
        (math.nan, "Which of these states is farthest north?"),
        ("nan", "Which of these states is farthest north?"),
        ("Look at the map.", "Look at the map. Which of these states is farthest north?"),
    ],
)
def test_mmbench(hint, question):
    text = lmms.mmbench_doc_to_text(mmbench_doc(hint), kwargs(lmms.MMBENCH_EN_YAML))
    assert read(text) == (
        question,
        ("West Virginia", "Louisiana", "Arizona", "Oklahoma"),
        "choice",
        "option_letter_directly",
    )


def test_mmbench_with_fewer_options_than_letters():
    doc = mmbench_doc(math.nan, C=math.nan, D=None)
    text = lmms.mmbench_doc_to_text(doc, kwargs(lmms.MMBENCH_EN_YAML))
    assert read(text)[1] == ("West Virginia", "Louisiana")


def mmmu_doc(question_type):
    return {
        "id": "validation_Art_1",
        "question": "Who painted <image 1>?",
        "options": "['Monet', 'Manet', 'Degas']" if question_type == "multiple-choice" else "[]",
        "question_type": question_type,
        "answer": "A",
    }


@pytest.mark.parametrize(
    ("variant", "question_type", "expected"),
    [
        ("default", "multiple-choice", (("Monet", "Manet", "Degas"), "choice", "option_letter_directly")),
        ("default", "open", ((), "text", "single_word_or_phrase")),
        ("qwen3_vl", "multiple-choice", (("Monet", "Manet", "Degas"), "choice", "option_letter_only")),
        ("qwen3_vl", "open", ((), "text", "select_from_options")),
    ],
)
def test_mmmu(variant, question_type, expected):
    text = lmms.mmmu_doc_to_text(mmmu_doc(question_type), kwargs(lmms.MMMU_VAL_YAML, variant))
    assert read(text) == ("Who painted <image 1>?", *expected)


REALWORLDQA_CHOICE = (
    "In which direction is the front wheel of the car on the right side facing?\n\nA. Left\nB. Straight\n"
    "C. Right\n\nPlease answer directly with only the letter of the correct option and nothing else."
)
REALWORLDQA_OPEN = "How many cars are in the image?\nPlease answer directly with a single word or number."


def test_realworldqa_multiple_choice():
    text = lmms.realworldqa_doc_to_text({"question": REALWORLDQA_CHOICE}, kwargs(lmms.REALWORLDQA_YAML))
    assert read(text) == (
        "In which direction is the front wheel of the car on the right side facing?",
        ("Left", "Straight", "Right"),
        "choice",
        "option_letter_nothing_else",
    )


def test_realworldqa_open():
    text = lmms.realworldqa_doc_to_text({"question": REALWORLDQA_OPEN}, kwargs(lmms.REALWORLDQA_YAML))
    assert read(text) == ("How many cars are in the image?", (), "number", "single_word_or_number")


@pytest.mark.parametrize(
    "question",
    [form.format(colour="red", shape="circle") for forms in PAIR_QUESTIONS.values() for form in forms],
)
def test_llava_interleave_in_domain_sends_a_two_image_question_as_it_is(question):
    """evaluation/lmms_eval_pairs.py's documents are multi-choice; the task's post-prompts are empty."""
    doc = {"question": question, "question_type": "multi-choice", "answer": "yes"}
    text = lmms.doc_to_text(doc, kwargs(lmms.INTERLEAVE_IN_DOMAIN_YAML))
    kind = "number" if question.lower().startswith(("how many", "in these")) else "yes_no"
    assert read(text) == (question, (), kind, None)


# ---------------------------------------------------------------- through the edge and the cascade


def test_pope_through_the_cascade_the_stages_carry_only_the_papers_instructions():
    text = lmms.pope_doc_to_text(POPE_DOC, kwargs(lmms.POPE_YAML))
    job = chat_job(CONFIG, chat_body(text, model="mai"))
    small = ScriptedVLM({S: "[[no]]", R: "I see a cat and no dog. [[no]]"})
    large = ScriptedVLM({S: "[[yes]]", T: "[[No, there is no dog.]]"})
    result = asyncio.run(Cascade(small, large).run(job.question, job.options))

    # POPE's process_results scores `pred.lower().strip() == "no"`: the reply is the word alone.
    assert (result.route, result.answer) == ("transfer", "No")
    calls = small.calls + large.calls
    assert [call.prompt_kind for call in calls] == [S, R, S, T]
    for call in calls:  # every stage: the image, the bare question, the stage's own instruction
        [message] = call.messages
        image, text = message["content"]
        question, instruction = text["text"].split("\n", 1)  # the paper's layout: a line of its own
        assert question == "Is there a dog in the image?"
        if call.prompt_kind in (S, R):
            assert instruction == TEMPLATES[(call.prompt_kind, SHORT)]
    trace = result.trace.to_dict()
    assert trace["format_instruction"]["form"] == "single_word_or_phrase"
    assert trace["format_instruction"]["text"] == "Answer the question using a single word or phrase."
    assert trace["choices_from_text"] == []


def test_mmbench_through_the_cascade_reads_the_options_and_replies_with_a_letter():
    text = lmms.mmbench_doc_to_text(mmbench_doc("Look at the map."), kwargs(lmms.MMBENCH_EN_YAML))
    job = chat_job(CONFIG, chat_body(text, model="mai"))
    small = ScriptedVLM({S: "[[A. West Virginia]]"})
    large = ScriptedVLM({S: "The answer is (A)"})
    result = asyncio.run(Cascade(small, large).run(job.question, job.options))

    assert (result.route, result.answer) == ("agree_short", "A")
    for call in small.calls + large.calls:
        assert call.messages[0]["content"][1]["text"] == (
            "Look at the map. Which of these states is farthest north?\n"
            "A. West Virginia\nB. Louisiana\nC. Arizona\nD. Oklahoma\n" + TEMPLATES[(S, CHOICE)]
        )
    trace = result.trace.to_dict()
    assert trace["kind"] == "choice" and trace["format_instruction"]["form"] == "option_letter_directly"
    assert trace["choices_from_text"] == ["West Virginia", "Louisiana", "Arizona", "Oklahoma"]


def test_the_vendored_version_is_the_one_make_lmms_eval_installs():
    requirements = Path(__file__).resolve().parents[2] / "requirements"
    assert f"lmms-eval=={lmms.VERSION}" in (requirements / "lmms-eval.txt").read_text().split()
    lock = (requirements / "lmms-eval-lock.txt").read_text().splitlines()
    pins = dict(line.replace("_", "-").lower().split("==") for line in lock if not line.startswith("#"))
    assert pins["lmms-eval"] == lmms.VERSION
