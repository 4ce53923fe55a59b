"""Sections of bench/RESULTS.md for the evaluations' result files: the demo pair on easy-vqa's test split
and its calibration on the validation split (``python -m evaluation.demo_eval``), the either-or
questions, lmms-eval's own tasks against the server, and how strict verification is. Each is a
scenario without a run: its table here, from its file, and a link to the page written beside the file
(``demo.md``, ``results.md``, ``calibration.md``, ``matcher.md``) where the page has more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .plans import named_now
from .scenario import Scenario


def link(page: str) -> str:
    """A markdown link from bench/RESULTS.md to ``page`` under bench/results."""
    return f"[{page}](results/{page})"


def page_body(markdown: str) -> list[str]:
    """A page's lines under a section of RESULTS.md: its title line dropped, its sections one level
    down."""
    lines = markdown.rstrip("\n").split("\n")
    if lines and lines[0].startswith("# "):
        lines = lines[2:] if len(lines) > 1 and not lines[1] else lines[1:]
    return ["#" + line if line.startswith("## ") else line for line in lines]


def interval(bounds: Sequence[float] | None, digits: int = 1) -> str:
    return "–" if not bounds else f"[{bounds[0]:.{digits}f}–{bounds[1]:.{digits}f}]"


def demo_eval_table(result: dict[str, Any]) -> list[str]:
    """The model card's table (the page ``demo.md`` is), with mai-eval's own tables of the runs."""
    from evaluation.demo_summary import render

    return [
        *page_body(render(result)),
        "",
        f"The page: {link('demo-eval/demo.md')}; mai-eval's tables of the runs: "
        f"{link('demo-eval/results.md')} (`results.json`) and, the questions as typed, "
        f"{link('demo-eval/typed/results.md')} (`typed/results.json`).",
    ]


def _calibration_row(result: dict[str, Any]) -> str:
    return (
        f"| {result['name']} | {result['accuracy']:.1f} {interval(result.get('accuracy_95ci'))} | "
        f"{100 * result['escalated']:.0f} | {result['small_completion_tokens']:.1f} | "
        f"{result['large_completion_tokens']:.1f} | {result['latency_s']:.3f} | {result['engine_s']:.3f} |"
    )


def calibration_table(result: dict[str, Any]) -> list[str]:
    """The baselines, the paper's rule and the rule chosen, then the plan the table names per kind."""
    lines = [
        f"{result['questions']} questions of easy-vqa's validation split, each rule replayed by running the "
        f"real cascade over the stages one pass recorded ({', '.join(result['runs'])}); goal: "
        f"{result['goal']}.",
        "",
        "| rule or baseline | accuracy % [95 % CI] | escalated % | small tokens/q | large tokens/q | "
        "expected latency s | engine s |",
        "|---|---|---|---|---|---|---|",
        *(_calibration_row(baseline) for baseline in result["baselines"].values()),
        _calibration_row(result["paper_rule"]),
    ]
    chosen = result.get("chosen")
    if chosen:
        lines.append(_calibration_row(chosen | {"name": f"**chosen: {chosen['name']}**"}))
        low, high = chosen["difference_vs_full_rt_95ci"]
        lines += ["", f"The chosen rule against Full RT: {low:+.1f} to {high:+.1f} points (95 % CI)."]
    else:
        lines += ["", "No rule meets the goal."]
    if result.get("precision_note"):
        lines += ["", f"Note: {result['precision_note']}"]
    if result.get("plans"):
        lines += [
            "",
            "The plan the table names per answer kind (the cheapest within the goal's accuracy of Full RT on "
            "that kind):",
            "",
            "| kind | questions | plan | its accuracy % | Full RT's accuracy % | its engine s | "
            "Full RT's engine s |",
            "|---|---|---|---|---|---|---|",
        ]
        for kind, entry in result["plans"].items():
            # Calibrations from before plans were named apart from policies name Full RT "transfer".
            full_rt = entry["plans"].get("full-transfer") or entry["plans"]["transfer"]
            named = entry["plans"][entry["plan"]]
            lines.append(
                f"| {kind} | {entry['questions']} | {named_now(entry['plan'])} | {named['accuracy']:.1f} | "
                f"{full_rt['accuracy']:.1f} | {named['engine_s']:.3f} | {full_rt['engine_s']:.3f} |"
            )
    return [
        *lines,
        "",
        f"Every rule of the front: {link('demo-calibration/calibration.md')}; accuracy against expected "
        f"latency: {link('demo-calibration/calibration.png')}.",
    ]


def matcher_table(result: dict[str, Any]) -> list[str]:
    """The page ``matcher.md`` is, under this section."""
    from evaluation.matcher_report import render

    return [*page_body(render(result)), "", f"The page: {link('verification/matcher.md')}."]


def either_or_table(result: dict[str, Any]) -> list[str]:
    """mai-eval's score per policy with its interval and routes; its whole report beside the file."""
    policies = result["policies"]
    lines = [
        f"{next(iter(policies.values()))['records']} either/or questions of easy-vqa's validation split "
        "(the demo models never saw one), every policy on the CPU stack.",
        "",
        "| policy | score % | 95 % CI | answered | errors | routes |",
        "|---|---|---|---|---|---|",
    ]
    for name, policy in policies.items():
        routes = ", ".join(f"{route} {100 * share:.0f} %" for route, share in policy["route_shares"].items())
        metrics = policy["metrics"]
        lines.append(
            f"| {name} | {metrics['score']:.1f} | {interval(metrics.get('score_95ci'))} | "
            f"{policy['answered']} | {policy['errors']} | {routes} |"
        )
    return lines


def either_or_section(folder: str, title: str) -> Scenario:
    """The section of one either-or run, ``bench/results/either-or/<folder>/results.json``."""
    report = f"either-or/{folder}/results.md"
    return Scenario(
        name=f"either-or-{folder}",
        title=f"{title} (mai-eval, the CPU stack)",
        result=f"either-or/{folder}/results.json",
        table=lambda result: [*either_or_table(result), "", f"The report: {link(report)}."],
        command="python -m evaluation.demo_eval --either-or",
    )


def lmms_eval_table(result: dict[str, Any]) -> list[str]:
    """Accuracy per task and policy with its interval, the share of replies in the task's format, and
    the differences between a question's two forms."""
    tasks = result["tasks"]
    policies = list(next(iter(tasks.values())))
    header = "| policy | " + " | ".join(f"`{task}`" for task in tasks) + " |"
    rule = "|---|" + "---|" * len(tasks)
    lines = [
        "lmms-eval's own tasks (`--model openai`), only the dataset swapped for a seeded sample of "
        "easy-vqa's test split: `easyvqa_pope` POPE's task, `easyvqa_pope_bare` the same without its "
        "instruction, `easyvqa_mmbench` shape questions in MMBench's form (options, a letter), "
        "`easyvqa_shape` the same questions for the shape. Accuracy % [95 % CI]:",
        "",
        header,
        rule,
    ]
    for policy in policies:
        scored = [tasks[task][policy] for task in tasks]
        cells = [f"{100 * s['accuracy']:.1f} {interval([100 * b for b in s['ci95']])}" for s in scored]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    lines += ["", "Replies in the task's format, %:", "", header, rule]
    for policy in policies:
        cells = [f"{100 * tasks[task][policy]['in_format']:.1f}" for task in tasks]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    differences = result.get("differences") or {}
    if differences:
        lines += [
            "",
            "Points between a question's two forms: "
            + "; ".join(
                f"{policy} "
                + ", ".join(f"{name.replace('_', ' ')} {value:+.1f}" for name, value in diff.items())
                for policy, diff in differences.items()
            )
            + ". The replies per question are in `predictions.jsonl` beside the file.",
        ]
    return lines


DEMO_EVAL_SECTION = Scenario(
    name="demo-eval",
    title="The demo models on easy-vqa's test split (mai-eval, the CPU stack)",
    result="demo-eval/demo.json",
    table=demo_eval_table,
    command="make eval-demo",
)
CALIBRATION_SECTION = Scenario(
    name="demo-calibration",
    title="The demo pair's calibration on easy-vqa's validation split",
    result="demo-calibration/calibration.json",
    table=calibration_table,
    command="make calibrate-demo",
)
MATCHER_SECTION = Scenario(
    name="verification",
    title="How strict verification is: the strict rule against the previous one",
    result="verification/matcher.json",
    table=matcher_table,
    command="python -m evaluation.matcher_report",
)
EITHER_OR_NAMED_SECTION = either_or_section("named", "Either/or questions as written")
EITHER_OR_CHOICES_SECTION = either_or_section(
    "choices", "Either/or questions with their options sent as `choices`"
)
LMMS_EVAL_SECTION = Scenario(
    name="lmms-eval",
    title="lmms-eval's own tasks on easy-vqa against the CPU stack",
    result="lmms-eval/easy-vqa.json",
    table=lmms_eval_table,
    command="python -m evaluation.lmms_eval_bench",
)
LMMS_EVAL_BEFORE_SECTION = Scenario(
    name="lmms-eval-before-853c4c4",
    title="lmms-eval's own tasks against a server at 853c4c4 (the client's instruction in every stage)",
    result="lmms-eval/before-853c4c4/easy-vqa.json",
    table=lmms_eval_table,
    command="python -m evaluation.lmms_eval_bench --url <a server at 853c4c4> "
    "--out bench/results/lmms-eval/before-853c4c4",
)
EVALUATION_SECTIONS = [
    DEMO_EVAL_SECTION,
    CALIBRATION_SECTION,
    MATCHER_SECTION,
    EITHER_OR_NAMED_SECTION,
    EITHER_OR_CHOICES_SECTION,
    LMMS_EVAL_SECTION,
    LMMS_EVAL_BEFORE_SECTION,
]
