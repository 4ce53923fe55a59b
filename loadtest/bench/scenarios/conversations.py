"""conversations: follow-up turns and two-image questions on the CPU stack (configs/mai-cpu.yaml), one
scenario with three variants (``--param variant=validation|test|learnt``).

``validation``: the validation images (easy-vqa train images the demo models never saw); ``test``:
easy-vqa's test images, run once per released pair: questions in the held-out phrasings of
``harness.multi_turn``; ``learnt``: the validation images in the phrasings the demo models learnt.
Three arms per question, their order rotated question by question: ``mai`` (the cascade, which now
takes them), ``mai-transfer`` (Full RT) and ``demo-large`` (the large model alone, unchanged: what
``mai`` did with these requests before, a passthrough).
Per arm and kind: accuracy with its 95 % Wilson interval, the request's wall time (median, p90) and
the engines' tokens. The cached prefix share of a follow-up is measured first, on conversations of
their own: the first turn is asked (one image, one question), then its follow-up, whose stages find
the conversation's prefix in the engines' caches (each stage's ``cached_tokens``). Every answer is
kept (``predictions``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from ..scenario import Bench, Scenario, family

ARMS = ("mai", "mai-transfer", "demo-large")


@dataclass(frozen=True)
class Parameters:
    questions: int = 40  # per kind (follow-ups, two-image questions)
    cached: int = 20  # conversations asked turn by turn for the cached share
    seed: int = 0
    split: str = "validation"  # or "test": easy-vqa's test images
    held_out: bool = True  # the phrasings the demo models never learnt; False: those they learnt


def _images(split: str) -> tuple[dict[int, Any], dict[int, str]]:
    """What each image of ``split`` shows (those whose answers pin it down), and its data URL."""
    import base64
    from pathlib import Path

    import easy_vqa

    from harness.easy_vqa import QA, facts_by_image, validation_facts

    if split == "test":
        questions, answers, ids = easy_vqa.get_test_questions()
        qas = [QA(i, q, a) for q, a, i in zip(questions, answers, ids, strict=True)]
        facts, paths = facts_by_image(qas), easy_vqa.get_test_image_paths()
    elif split == "validation":
        facts, paths = validation_facts()
    else:
        raise ValueError(f"split must be validation or test, got {split!r}")
    urls = {
        image: "data:image/png;base64," + base64.b64encode(Path(paths[image]).read_bytes()).decode()
        for image in facts
    }
    return facts, urls


def _ask(http: Any, arm: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    response = http.post("/v1/chat/completions", json={"model": arm, "messages": messages, "max_tokens": 128})
    wall = time.perf_counter() - started
    body = response.json()
    if response.status_code != 200:
        return {"status": response.status_code, "wall_s": wall, "answer": None, "error": body.get("error")}
    mai = body.get("mai") or {}
    trace = mai.get("trace") or {}
    usage = body.get("usage") or {}
    return {
        "status": 200,
        "wall_s": wall,
        "answer": body["choices"][0]["message"]["content"],
        "route": trace.get("route") or mai.get("route") or response.headers.get("x-mai-route"),
        "tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
        "context_turns": trace.get("context_turns"),
        "images": trace.get("images"),
        "stages": [
            {key: stage.get(key) for key in ("name", "prompt_tokens", "cached_tokens", "status")}
            for stage in trace.get("stages", [])
        ],
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from serve_app.core.intervals import wilson_interval

    correct = sum(row["score"] for row in rows)
    walls = sorted(row["wall_s"] for row in rows)
    low, high = wilson_interval(int(correct), len(rows))
    return {
        "questions": len(rows),
        "accuracy": round(correct / len(rows), 4),
        "ci95": [round(low, 4), round(high, 4)],
        "wall_s_median": round(statistics.median(walls), 3),
        "wall_s_p90": round(walls[int(0.9 * (len(walls) - 1))], 3),
        "wall_s_total": round(sum(walls), 2),
        "tokens_per_request": round(sum(row["tokens"] for row in rows) / len(rows), 1),
        "errors": sum(row["status"] != 200 for row in rows),
        "routes": {
            route: sum(row.get("route") == route for row in rows) for route in {r.get("route") for r in rows}
        },
    }


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    import httpx

    from evaluation.scoring import score
    from harness.local_server import config_args, deploy
    from harness.multi_turn import chat_messages, draw

    facts, urls = _images(parameters.split)
    if not bench.served:
        # The cascade's runs are what this measures (the variants ask the same conversations on one
        # deployment): no answer reused.
        deploy(config_args("mai-cpu.yaml", {"cache": {"enabled": False}}))
    drawn = draw(facts, sorted(facts), parameters.questions, parameters.seed, held_out=parameters.held_out)
    cached_set = draw(facts, sorted(facts), parameters.cached, parameters.seed + 1)["follow_up"]
    predictions: list[dict[str, Any]] = []
    with httpx.Client(base_url=bench.url, timeout=300) as http:
        cached = []
        for record in cached_set:
            messages = chat_messages(record, urls.__getitem__)
            first = _ask(http, "mai", messages[:1])
            second = _ask(http, "mai", messages)
            cached.append({"first": first, "follow_up": second})
        for number, record in enumerate(drawn["follow_up"] + drawn["images"]):
            messages = chat_messages(record, urls.__getitem__)
            order = ARMS[number % 3 :] + ARMS[: number % 3]
            for arm in order:
                reply = _ask(http, arm, messages)
                reply["score"] = score(reply["answer"], record) if reply["status"] == 200 else 0.0
                predictions.append(
                    {
                        "id": record["id"],
                        "kind": record["kind"],
                        "arm": arm,
                        "question": record["question"],
                        "truth": record["answer"],
                    }
                    | reply
                )
    by: dict[str, dict[str, Any]] = {}
    for kind in ("follow_up", "images"):
        by[kind] = {
            arm: _summary([p for p in predictions if p["arm"] == arm and p["kind"].startswith(kind)])
            for arm in ARMS
        }
    shares = []
    for pair in cached:
        stages = [
            s for s in pair["follow_up"]["stages"] if s["status"] == "ok" and s["cached_tokens"] is not None
        ]
        prompt = sum(s["prompt_tokens"] for s in stages)
        shares.append(sum(s["cached_tokens"] for s in stages) / prompt if prompt else 0.0)
    return {
        "by_kind": by,
        "cached_prefix": {
            "conversations": len(cached),
            "follow_up_cached_share_median": round(statistics.median(shares), 3),
            "follow_up_cached_share_min": round(min(shares), 3),
            "follow_up_cached_share_max": round(max(shares), 3),
        },
        "predictions": predictions,
        "split": parameters.split,
        "phrasings": "held out" if parameters.held_out else "learnt",
        "note": "configs/mai-cpu.yaml (demo pair, 1 replica per model), one request at a time, arms' order "
        f"rotated per question; {parameters.split} images, "
        f"{'held-out' if parameters.held_out else 'learnt'} phrasings (harness/multi_turn.py); "
        "demo-large is the large model alone with the request unchanged, what mai did with these "
        "requests before the cascade read them; the demo pair learnt follow-ups and two-image questions "
        "in the other phrasings (training/demo_conversations.py)",
    }


def table(result: dict[str, Any]) -> list[str]:
    cached = result["cached_prefix"]
    lines = [
        f"Follow-up and two-image questions on the CPU stack ({result.get('split', 'validation')} images, "
        f"{result.get('phrasings', 'held out')} phrasings), one "
        "request at a time: accuracy with its 95 % interval, wall time per request, engine tokens per "
        f"request. A follow-up's stages found a median {cached['follow_up_cached_share_median'] * 100:.0f} % "
        f"of their prompt tokens in the engines' caches after its first turn ({cached['conversations']} "
        "conversations).",
        "",
        "| questions | arm | n | accuracy | 95 % interval | wall median s | wall p90 s | tokens / request |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, arms in result["by_kind"].items():
        for arm, row in arms.items():
            low, high = row["ci95"]
            lines.append(
                f"| {kind} | {arm} | {row['questions']} | {row['accuracy'] * 100:.1f}% | "
                f"{low * 100:.1f}-{high * 100:.1f}% | {row['wall_s_median']} | {row['wall_s_p90']} | "
                f"{row['tokens_per_request']} |"
            )
    return lines


SCENARIO = family(
    "conversations",
    Scenario(
        name="conversations",
        variant="validation",
        title="Follow-ups and two images through the cascade",
        result="conversations.json",
        config="mai-cpu.yaml",
        run=run,
        table=table,
        parameters=Parameters(),
    ),
    Scenario(
        name="conversations",
        variant="test",
        title="Follow-ups and two images through the cascade: the test split, once",
        result="conversations-test.json",
        config="mai-cpu.yaml",
        run=run,
        table=table,
        parameters=Parameters(split="test"),
    ),
    Scenario(
        name="conversations",
        variant="learnt",
        title="Follow-ups and two images through the cascade: the phrasings the demo pair learnt",
        result="conversations-learnt.json",
        config="mai-cpu.yaml",
        run=run,
        table=table,
        parameters=Parameters(held_out=False),
    ),
)
