"""The evaluation harness without a server: metrics on known pairs, the dataset format, converters,
summaries and the written report."""

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from evaluation.cli import build_parser, main
from evaluation.converters import lmms_eval_records, read_parquet_rows
from evaluation.predictions import PredictionStore, prediction_of
from evaluation.records import (
    DatasetError,
    EvalRecord,
    image_data_url,
    image_data_urls,
    image_fields,
    load_records,
    write_records,
)
from evaluation.report import add_speedups, markdown, summarize_policy, write_report
from evaluation.requests import chat_body, request_id
from evaluation.run import RunSpec
from evaluation.scoring import dataset_metrics, score, yes_no_metrics


def rec(answer, metric, **extra):
    return {"id": "r", "image": "x.png", "question": "Q?", "answer": answer, "metric": metric, **extra}


# ---------------------------------------------------------------- metrics on known pairs


@pytest.mark.parametrize(
    ("prediction", "record", "expected"),
    [
        # option accuracy: letters in any dress, or the option's own text
        ("(C)", rec("C", "option", choices=["1", "2", "3"]), 1.0),
        ("Answer: c.", rec("C", "option", choices=["1", "2", "3"]), 1.0),
        ("3", rec("C", "option", choices=["1", "2", "3"]), 1.0),
        ("B", rec("C", "option", choices=["1", "2", "3"]), 0.0),
        ("maybe", rec("C", "option", choices=["1", "2", "3"]), 0.0),
        # POPE: "Yes." is yes
        ("Yes.", rec("yes", "yes_no"), 1.0),
        ("no, there is none", rec("yes", "yes_no"), 0.0),
        ("unsure", rec("no", "yes_no"), 0.0),
        # ChartQA relaxed accuracy: 5 % tolerance, "12%" is 12, exact when gold is 0, text exact
        ("41", rec("42", "relaxed"), 1.0),
        ("39", rec("42", "relaxed"), 0.0),
        ("12%", rec("12", "relaxed"), 1.0),
        ("0.1", rec("0", "relaxed"), 0.0),
        ("Red.", rec("red", "relaxed"), 1.0),
        ("1,234", rec(["1234", "1.2k"], "relaxed"), 1.0),
        # ANLS: best of the accepted answers, 0 past the threshold
        ("new york", rec(["New York City", "new york"], "anls"), 1.0),
        ("nw york", rec("new york", "anls"), pytest.approx(1 - 1 / 8)),
        ("boston", rec("new york", "anls"), 0.0),
        # exact: case, whitespace and trailing punctuation do not count
        ("  Circle. ", rec("circle", "exact"), 1.0),
        ("circles", rec("circle", "exact"), 0.0),
        (None, rec("circle", "exact"), 0.0),
    ],
)
def test_score_on_known_pairs(prediction, record, expected):
    assert score(prediction, record) == expected


def test_unknown_metric_is_an_error():
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        score("a", rec("a", "bleu"))


def test_pope_metrics_count_yes_as_positive_and_unparseable_as_wrong():
    pairs = [("yes", "yes"), ("Yes.", "yes"), ("no", "yes"), ("?", "yes"), ("yes", "no"), ("no", "no")]
    metrics = yes_no_metrics(pairs)
    # tp 2, fn 2 (one said no, one said nothing), fp 1, tn 1
    assert metrics["accuracy"] == pytest.approx(3 / 6)
    assert metrics["precision"] == pytest.approx(2 / 3)
    assert metrics["recall"] == pytest.approx(2 / 4)
    assert metrics["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert metrics["yes_ratio"] == pytest.approx(3 / 6)


def test_dataset_metrics_adds_pope_figures_only_for_yes_no_sets():
    records = [rec("yes", "yes_no"), rec("no", "yes_no")]
    assert set(dataset_metrics(["yes", "yes"], records)) == {
        "score",
        "score_95ci",
        "accuracy",
        "precision",
        "recall",
        "f1",
        "yes_ratio",
    }
    assert dataset_metrics(["yes", "yes"], records)["score"] == 50.0
    assert dataset_metrics(["3"], [rec("3", "relaxed")]) == {"score": 100.0, "score_95ci": [100.0, 100.0]}
    with pytest.raises(ValueError, match="2 predictions for 1 records"):
        dataset_metrics(["a", "b"], [rec("a", "exact")])


# ---------------------------------------------------------------- dataset format


def write_lines(path: Path, lines) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def png(color=(10, 120, 200)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buffer, "PNG")
    return buffer.getvalue()


def test_records_load_with_numbers_as_text_and_images_from_relative_paths(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(png())
    path = write_lines(
        tmp_path / "set.jsonl",
        [
            {"id": 7, "image": "img/a.png", "question": "How many?", "answer": 3, "metric": "relaxed"},
            {
                "id": "b",
                "image": "data:image/png;base64,AAAA",
                "question": "Which?",
                "choices": ["x", "y"],
                "answer": "B",
                "answer_type": "choice",
                "metric": "option",
                "source": "kept",
            },
        ],
    )
    first, second = load_records(path)
    assert first.id == "7" and first.answer == "3"
    assert image_data_url(first.image, tmp_path).startswith("data:image/png;base64,iVBOR")
    assert image_data_url(second.image, tmp_path) == "data:image/png;base64,AAAA"
    assert second.model_dump()["source"] == "kept"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "set.jsonl:2: not JSON"),
        (
            {"id": "b", "image": "i.png", "question": "Q?", "answer": "a"},
            "set.jsonl:2: metric: Field required",
        ),
        (
            {"id": "b", "image": "i.png", "question": "Q?", "answer": "a", "metric": "bleu"},
            "set.jsonl:2: metric",
        ),
        (
            {"id": "a", "image": "i.png", "question": "Q?", "answer": "a", "metric": "exact"},
            "id 'a' already used on line 1",
        ),
        (
            {
                "id": "b",
                "image": "i.png",
                "question": "Which one?",
                "answer": "A",
                "answer_type": "choice",
                "metric": "option",
            },
            "needs choices",
        ),
    ],
)
def test_bad_records_name_the_line_and_the_problem(tmp_path, line, message):
    good = {"id": "a", "image": "i.png", "question": "Q?", "answer": "a", "metric": "exact"}
    path = write_lines(tmp_path / "set.jsonl", [good, line])
    with pytest.raises(DatasetError, match=message.replace("(", r"\(")):
        load_records(path)


def test_missing_or_unreadable_images_are_named(tmp_path):
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(DatasetError, match="'gone.png'"):
        image_data_url("gone.png", tmp_path)
    with pytest.raises(DatasetError, match="is not PNG, JPEG, GIF or WebP"):
        image_data_url("text.png", tmp_path)
    with pytest.raises(DatasetError, match="no such dataset file"):
        load_records(tmp_path / "absent.jsonl")


# ---------------------------------------------------------------- requests and predictions


def test_chat_body_carries_choices_kind_and_max_tokens():
    record = EvalRecord.model_validate(rec("B", "option", choices=["x", "y"], answer_type="choice"))
    body = chat_body(record, "data:image/png;base64,AAAA", "mai-transfer", max_tokens=16)
    assert body["model"] == "mai-transfer" and body["max_tokens"] == 16
    assert body["mai"] == {"choices": ["x", "y"], "answer_type": "choice"}
    assert [part["type"] for part in body["messages"][0]["content"]] == ["image_url", "text"]
    assert "mai" not in chat_body(EvalRecord.model_validate(rec("3", "relaxed")), "data:,", "mai")


def test_a_record_of_one_image_and_one_question_builds_the_same_body_as_before():
    """A record without ``images`` or ``turns``: byte for byte the body it always had."""
    record = EvalRecord.model_validate(rec("B", "option", choices=["x", "y"], answer_type="choice"))
    body = chat_body(record, "data:image/png;base64,AAAA", "mai", 16, "attention", {"plan": "eager"})
    expected = {
        "model": "mai",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "Q?"},
                ],
            }
        ],
        "mai": {
            "options": {"plan": "eager", "transfer_selector": "attention"},
            "choices": ["x", "y"],
            "answer_type": "choice",
        },
        "max_tokens": 16,
    }
    assert json.dumps(body) == json.dumps(expected)
    plain = EvalRecord.model_validate(rec("3", "relaxed"))
    by_field = chat_body(plain, {"image": "data:,a"}, "mai")
    assert json.dumps(by_field) == json.dumps(chat_body(plain, "data:,a", "mai"))


CONVERSATION = {
    "images": ["b.png", "data:image/png;base64,CCCC"],
    "turns": [
        {"role": "user", "text": "What is in the first chart?", "images": ["t0.png"]},
        {"role": "assistant", "text": "Sales by month."},
        {"role": "user", "images": ["data:image/png;base64,DDDD"]},
        {"role": "assistant", "text": "A second chart."},
    ],
}


def test_a_conversation_record_is_its_turns_then_the_questions_images_and_text():
    record = EvalRecord.model_validate(rec("3", "relaxed", **CONVERSATION))
    assert [field for field, _ in image_fields(record)] == [
        "turns[0].images[0]",
        "turns[2].images[0]",
        "image",
        "images[0]",
        "images[1]",
    ]
    urls = {"turns[0].images[0]": "data:,t0", "image": "data:,x", "images[0]": "data:,b"}
    body = chat_body(record, urls, "mai", max_tokens=8)  # data URLs not given are the record's own
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:,t0"}},
                {"type": "text", "text": "What is in the first chart?"},
            ],
        },
        {"role": "assistant", "content": "Sales by month."},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,DDDD"}}],
        },
        {"role": "assistant", "content": "A second chart."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:,x"}},
                {"type": "image_url", "image_url": {"url": "data:,b"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,CCCC"}},
                {"type": "text", "text": "Q?"},
            ],
        },
    ]
    assert body["max_tokens"] == 8 and "mai" not in body
    with pytest.raises(ValueError, match=r"turns\[0\]\.images\[0\] \('t0.png'\)"):
        chat_body(record, "data:,x", "mai")  # a path is never sent as it is


def test_every_image_of_a_record_is_read_from_the_datasets_folder(tmp_path):
    for name, color in (("x.png", (1, 2, 3)), ("b.png", (4, 5, 6)), ("t0.png", (7, 8, 9))):
        (tmp_path / name).write_bytes(png(color))
    record = EvalRecord.model_validate(rec("3", "relaxed", **CONVERSATION))
    urls = image_data_urls(record, tmp_path)
    assert urls["image"] == image_data_url("x.png", tmp_path) != urls["images[0]"]
    assert urls["turns[0].images[0]"] == image_data_url("t0.png", tmp_path)
    assert urls["images[1]"] == "data:image/png;base64,CCCC"
    assert set(urls) == {field for field, _ in image_fields(record)}
    (tmp_path / "t0.png").unlink()
    with pytest.raises(DatasetError, match="'t0.png'"):
        image_data_urls(record, tmp_path)


def test_written_records_keep_their_images_and_turns(tmp_path):
    path = tmp_path / "out.jsonl"
    assert write_records([rec("3", "relaxed", **CONVERSATION), rec("4", "relaxed") | {"id": "s"}], path) == 2
    first, second = load_records(path)
    assert first == EvalRecord.model_validate(rec("3", "relaxed", **CONVERSATION))
    assert (
        first.images == CONVERSATION["images"] and [t.text for t in first.turns or ()][1] == "Sales by month."
    )
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert written[0]["turns"] == CONVERSATION["turns"] and written[0]["images"] == CONVERSATION["images"]
    assert written[1] == rec("4", "relaxed") | {"id": "s"}  # a plain record stays plain
    assert second.turns is None and second.images is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {
                "turns": [
                    {"role": "user", "text": "Hi"},
                    {"role": "assistant", "text": "See", "images": ["a.png"]},
                ]
            },
            "turns.1.images: .*an assistant turn carries no images",
        ),
        ({"turns": [{"role": "user", "text": "Hi"}]}, "turns: .*alternate .*got user$"),
        (
            {"turns": [{"role": "assistant", "text": "Hi"}, {"role": "user", "text": "Q"}]},
            "got assistant, user",
        ),
        ({"turns": [{"role": "user", "text": "Hi"}] * 2}, "got user, user"),
        ({"turns": [{"role": "system", "text": "Be brief"}]}, "turns.0.role"),
        (
            {"turns": [{"role": "user", "content": "Hi"}, {"role": "assistant", "text": "Yo"}]},
            "turns.0.content",
        ),
        (
            {"turns": [{"role": "user"}, {"role": "assistant", "text": "Yo"}]},
            "turns.0: .*needs text or images",
        ),
        ({"turns": [{"role": "user", "text": "Hi"}, {"role": "assistant"}]}, "turns.1: .*needs text"),
        (
            {"turns": [{"role": "user", "text": "a"}, {"role": "assistant", "text": "b"}] * 9},
            "turns: .*at most 16",
        ),
        (
            {"turns": [{"role": "user", "images": ["a.png"] * 9}, {"role": "assistant", "text": "b"}]},
            "at most 8",
        ),
        ({"images": ["a.png"] * 8}, "images: .*at most 7"),
        ({"images": [""]}, "images.0"),
        (
            {
                "images": ["a.png"] * 7,
                "turns": [{"role": "user", "images": ["a.png"] * 8}, {"role": "assistant", "text": "b"}] * 2,
            },
            "the record has 24 images .*at most 16",
        ),
    ],
)
def test_a_bad_conversation_record_names_its_field(tmp_path, fields, message):
    path = write_lines(tmp_path / "set.jsonl", [rec("a", "exact") | fields])
    with pytest.raises(DatasetError, match=message):
        load_records(path)


@pytest.mark.parametrize("doc", ["docs/evaluation.md", "docs/batch.md"])
def test_the_docs_record_lines_with_images_or_turns_are_records(doc):
    text = (Path(__file__).resolve().parents[2] / doc).read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```json\n")[1:]]
    lines = [json.loads(line) for block in blocks for line in block.splitlines() if '"question"' in line]
    shown = [line for line in lines if "images" in line or "turns" in line]
    assert shown
    for line in shown:
        record = EvalRecord.model_validate(line)
        assert chat_body(record, {field: "data:," for field, _ in image_fields(record)}, "mai")


def test_a_run_sends_every_image_of_a_record(tmp_path, monkeypatch):
    import asyncio

    import evaluation.run
    from evaluation.run import DriveSettings, run_policy

    for name in ("x.png", "b.png", "t0.png"):
        (tmp_path / name).write_bytes(png())
    dataset = write_lines(tmp_path / "set.jsonl", [rec("3", "relaxed", **CONVERSATION)])
    records = load_records(dataset)
    http, calls = _answering([(200, ANSWER)])

    async def one_by_one(base_url, items, send, *, on_result, **_):
        async with http:
            for index, item in enumerate(items):
                on_result(await send(http, index, item))

    monkeypatch.setattr(evaluation.run, "closed_loop", one_by_one)
    store = PredictionStore(tmp_path / "out", dataset, records)
    store.open(fresh=True)
    asyncio.run(run_policy("http://mai", records, tmp_path, RunSpec.parse("mai"), store, DriveSettings()))
    (call,) = calls
    sent = json.loads(call.content)
    assert sent == chat_body(records[0], image_data_urls(records[0], tmp_path), "mai")
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user", "assistant", "user"]


def test_request_ids_are_header_safe_and_bounded():
    assert request_id("mai", "chart qa/17") == "eval.mai.chart_qa_17"
    long = request_id("mai", "x" * 300)
    assert len(long) == 128 and long != request_id("mai", "x" * 299)


def test_prediction_keeps_answer_score_route_and_stage_tokens_or_the_error():
    record = EvalRecord.model_validate(rec("42", "relaxed"))
    body = {
        "choices": [{"message": {"content": "41"}}],
        "usage": {"completion_tokens": 9},
        "mai": {
            "route": "transfer",
            "trace": {
                "kind": "number",
                "kind_basis": "imperative:count",
                "repair": {"stage": "transfer", "answer": "two", "repair": "repair_large", "answered": True},
                "stages": [
                    {
                        "name": "short_small",
                        "model": "small",
                        "prompt_kind": "simple",
                        "status": "ok",
                        "prompt_tokens": 5,
                        "completion_tokens": 2,
                        "latency_s": 0.1,
                        "output": "dropped",
                    }
                ],
            },
        },
    }
    row = prediction_of(record, "mai", 200, 0.5, body)
    assert row["score"] == 1.0 and row["route"] == "transfer" and row["kind"] == "number"
    assert row["stages"][0]["completion_tokens"] == 2 and "output" not in row["stages"][0]
    assert row["kind_basis"] == "imperative:count" and row["repair"]["repair"] == "repair_large"
    failed = prediction_of(record, "mai", 400, 0.01, {"error": {"message": "bad image"}})
    assert failed["error"] == "bad image" and "score" not in failed


# ---------------------------------------------------------------- summaries and the report


def stage(model, kind, tokens, status="ok"):
    return {"model": model, "prompt_kind": kind, "completion_tokens": tokens, "status": status}


def answered(record_id, answer, route, latency, stages):
    return {
        "id": record_id,
        "status": 200,
        "answer": answer,
        "route": route,
        "latency_s": latency,
        "stages": stages,
    }


def test_summary_has_route_shares_tokens_per_model_and_kind_latency_and_failures():
    records = [EvalRecord.model_validate(rec(str(i), "relaxed") | {"id": str(i)}) for i in range(4)]
    rows = {
        "0": answered(
            "0", "0", "agree_short", 1.0, [stage("small", "simple", 2), stage("large", "simple", 4)]
        ),
        "1": answered(
            "1",
            "9",
            "transfer",
            3.0,
            [
                stage("small", "simple", 2),
                stage("large", "simple", 2),
                stage("small", "reasoning", 100),
                stage("large", "transfer", 6),
            ],
        ),
        "2": {"id": "2", "status": 503, "latency_s": 0.1, "error": "busy"},
    }
    summary = summarize_policy(
        "mai", records, rows, [{"wall_s": 2.0, "requests": 3}, {"wall_s": 2.0, "requests": 1}]
    )
    assert summary["metrics"]["score"] == 25.0  # one right of four: the failed and the unasked count as wrong
    assert (summary["answered"], summary["errors"], summary["missing"]) == (2, 1, 1)
    assert summary["route_shares"] == {"agree_short": 0.5, "transfer": 0.5}
    assert summary["tokens_per_call"]["small"] == {"reasoning": 100, "simple": 2}
    assert summary["tokens_per_call"]["large"] == {"simple": 3, "transfer": 6}
    assert summary["completion_tokens_per_request"] == {"small": 52, "large": 6}
    assert summary["wall_s"] == 4.0 and summary["requests_per_s"] == 1.0 and summary["segments"] == 2
    assert summary["latency_p50_s"] == 2.0 and summary["latency_sum_s"] == 4.0


def test_summary_reports_the_average_transferred_tokens():
    records = [EvalRecord.model_validate(rec("1", "relaxed") | {"id": str(i)}) for i in range(3)]
    rows = {
        "0": answered("0", "1", "transfer", 1.0, [])
        | {"transfer": {"selector": "attention", "tokens_before": 100, "tokens_after": 40}},
        "1": answered("1", "1", "transfer", 1.0, [])
        | {"transfer": {"selector": "attention", "tokens_before": 60, "tokens_after": 20}},
        "2": answered("2", "1", "transfer", 1.0, [])
        | {
            "transfer": {
                "selector": "attention",
                "tokens_before": 9,
                "tokens_after": 9,
                "error": "scorer down",
            }
        },
    }
    summary = summarize_policy("mai-transfer", records, rows, [])
    assert (
        summary["transfers"] == 2
        and summary["transferred_tokens_mean"] == 30
        and summary["reasoning_tokens_mean"] == 80
    )
    body = chat_body(records[0], "data:,", "mai-transfer", transfer_selector="attention")
    assert body["mai"]["options"] == {"transfer_selector": "attention"}


def test_summary_counts_the_answers_asked_again_in_their_form():
    records = [EvalRecord.model_validate(rec("1", "relaxed") | {"id": str(i)}) for i in range(3)]
    repair = {"stage": "reasoning_small", "answer": None, "repair": "repair_small", "answered": True}
    rows = {
        "0": answered("0", "1", "fallback", 1.0, []) | {"repair": repair},
        "1": answered("1", "1", "agree_short", 1.0, []) | {"repair": None},
        "2": {"id": "2", "status": 503, "latency_s": 0.1, "error": "busy", "repair": repair},
    }
    assert summarize_policy("mai", records, rows, [])["repairs"] == 1  # of answered rows only


def test_cancelled_stages_count_in_totals_not_in_per_call_means():
    records = [EvalRecord.model_validate(rec("1", "relaxed"))]
    rows = {
        "r": answered(
            "r",
            "1",
            "agree_short",
            1.0,
            [stage("small", "simple", 2), stage("small", "reasoning", 0, "cancelled")],
        )
    }
    summary = summarize_policy("mai", records, rows, [])
    assert summary["tokens_per_call"]["small"] == {"simple": 2}
    assert summary["requests_per_s"] is None


def test_speedups_are_baseline_over_policy():
    summaries = {
        "mai": {"wall_s": 10.0, "latency_sum_s": 40.0},
        "mai-transfer": {"wall_s": 25.0, "latency_sum_s": 100.0},
    }
    add_speedups(summaries, "mai-transfer")
    assert summaries["mai"]["speedup"] == 2.5 and summaries["mai"]["latency_speedup"] == 2.5
    assert summaries["mai-transfer"]["speedup"] == 1.0
    add_speedups(summaries, None)
    assert summaries["mai"]["speedup"] is None


def test_report_writes_markdown_csv_json_and_plot(tmp_path):
    records = [EvalRecord.model_validate(rec("yes", "yes_no") | {"id": str(i)}) for i in range(2)]
    rows = {
        "0": answered("0", "yes", "agree_short", 1.0, [stage("small", "simple", 1)]),
        "1": answered("1", "no", "transfer", 2.0, [stage("large", "transfer", 3)]),
    }
    summaries = {
        policy: summarize_policy(policy, records, rows, [{"wall_s": wall, "requests": 2}])
        for policy, wall in (("mai", 2.0), ("mai-transfer", 5.0))
    }
    add_speedups(summaries, "mai-transfer")
    meta = {"command": "mai-eval run pope.jsonl", "commit": "c0ffee", "uncommitted_changes": False}
    paths = write_report(
        tmp_path,
        summaries,
        meta | {"dataset": "pope.jsonl", "url": "http://x", "concurrency": 4, "baseline": "mai-transfer"},
    )
    text = paths["markdown"].read_text()
    assert (
        "| mai | 50.0 | 0.0–100.0 | 50.0 |" in text and "2.50×" in text
    )  # score, its CI, POPE accuracy, speedup
    assert "1 (50.0%)" in text  # the agree_short column
    assert (
        "| small simple | large transfer |" in text and "large reasoning" not in text
    )  # only kinds that ran
    rows_csv = list(csv.DictReader(paths["csv"].open()))
    assert [row["policy"] for row in rows_csv] == ["mai", "mai-transfer"] and float(rows_csv[0]["f1"]) > 0
    assert json.loads(paths["json"].read_text())["policies"]["mai"]["speedup"] == 2.5
    assert paths["plot"].read_bytes().startswith(b"\x89PNG")
    # results.json: the summaries, then the run's provenance record under meta (the one writer's form).
    written = json.loads(paths["json"].read_text())
    assert list(written) == ["policies", "meta"] and written["meta"]["command"] == "mai-eval run pope.jsonl"
    assert paths["json"].read_text() == json.dumps(written, indent=2) + "\n"
    with pytest.raises(ValueError, match="command"):
        write_report(
            tmp_path, summaries, {"dataset": "pope.jsonl", "url": "x", "concurrency": 4, "baseline": "mai"}
        )


def fake_server(monkeypatch, answer="yes"):
    """mai-eval's passes against no server: every policy answers ``answer`` to every record."""
    import evaluation.passes

    async def check_server(url, policies, api_key):
        return None

    async def run_policy(url, records, dataset_dir, run, store, settings, on_row=None):
        done = store.done(run.name)
        for record in records:
            if record.id not in done:
                row = answered(record.id, answer, "single", 0.1, [stage("large", "simple", 2)])
                row["score"] = score(answer, record.model_dump())
                store.append(run.name, row)
                if on_row is not None:
                    on_row(row)
        store.add_segment(
            run.name, {"started": 0.0, "wall_s": 1.0, "requests": len(records), "concurrency": 1}
        )
        return {}

    monkeypatch.setattr(evaluation.passes, "check_server", check_server)
    monkeypatch.setattr(evaluation.passes, "run_policy", run_policy)


def test_run_and_report_write_results_naming_the_command_and_commit(tmp_path, monkeypatch, capsys):
    from harness.provenance import git_commit

    fake_server(monkeypatch)
    data = write_lines(tmp_path / "d.jsonl", [rec("yes", "yes_no") | {"id": str(i)} for i in range(3)])
    out = tmp_path / "o"
    argv = [
        "run",
        str(data),
        "--out",
        str(out),
        "--url",
        "http://x",
        "--policies",
        "mai-large",
        "--no-progress",
    ]
    assert main(argv) == 0
    run = json.loads((out / "run.json").read_text())
    results = json.loads((out / "results.json").read_text())
    assert results["meta"] == run and results["policies"]["mai-large"]["answered"] == 3
    assert run["command"] == "mai-eval " + " ".join(argv)
    assert run["commit"] == git_commit()["commit"] and isinstance(run["uncommitted_changes"], bool)
    assert run["dataset"] == str(data) and run["policies"] == ["mai-large"] and run["url"] == "http://x"
    # Rebuilt: the run's record, and the command and commit that rebuilt the tables.
    assert main(["report", str(out)]) == 0
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert meta == run | {"reported": {"command": f"mai-eval report {out}", **git_commit()}}
    # A run recorded before runs named their command: the file names the command that rebuilt it.
    (out / "run.json").write_text(json.dumps({k: v for k, v in run.items() if k != "command"}))
    assert main(["report", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["meta"]["command"] == f"mai-eval report {out}"
    assert "| mai-large | 100.0 |" in capsys.readouterr().out


def test_store_resumes_only_answered_rows_and_refuses_another_dataset(tmp_path):
    data = write_lines(
        tmp_path / "a.jsonl", [rec("1", "exact") | {"id": "1"}, rec("2", "exact") | {"id": "2"}]
    )
    records = load_records(data)
    store = PredictionStore(tmp_path / "out", data, records)
    store.open(fresh=False)
    store.append("mai", {"id": "1", "status": 200})
    store.append("mai", {"id": "2", "status": 503})
    with store.path("mai").open("a") as file:
        file.write('{"id": "2", "sta')  # a line cut short by a kill
    assert store.done("mai") == {"1"}
    other = write_lines(tmp_path / "b.jsonl", [rec("3", "exact")])
    with pytest.raises(ValueError, match="holds results of another dataset"):
        PredictionStore(tmp_path / "out", other, load_records(other)).open(fresh=False)
    PredictionStore(tmp_path / "out", other, load_records(other)).open(fresh=True)
    assert store.done("mai") == set()


# ---------------------------------------------------------------- converters and the command line


def test_lmms_eval_rows_convert_per_task(tmp_path):
    image = {"bytes": png(), "path": None}
    table = pa.Table.from_pylist(
        [
            {
                "index": 5,
                "question": "Which animal?",
                "hint": "nan",
                "A": "cat",
                "B": "dog",
                "C": None,
                "D": "nan",
                "answer": "B",
                "image": image,
            }
        ]
    )
    pq.write_table(table, tmp_path / "mmbench.parquet")
    records, skipped = lmms_eval_records(
        "mmbench", read_parquet_rows([tmp_path / "mmbench.parquet"]), tmp_path / "imgs"
    )
    assert skipped == 0
    [record] = records
    assert record["choices"] == ["cat", "dog"] and record["metric"] == "option" and record["answer"] == "B"
    assert (tmp_path / record["image"]).read_bytes() == image["bytes"]

    rwqa = {
        "question": "Where is the car?\nA. left\nB. right\nPlease answer directly with only the letter of "
        "the correct option and nothing else.",
        "answer": "A",
        "image": image,
    }
    [converted], _ = lmms_eval_records("realworldqa", [rwqa], tmp_path / "imgs")
    assert converted["question"] == "Where is the car?" and converted["choices"] == ["left", "right"]
    mmmu_two_images = {
        "id": "v1",
        "question": "<image 1> vs <image 2>?",
        "options": "['a', 'b']",
        "answer": "A",
        "question_type": "multiple-choice",
        "image_1": image,
        "image_2": image,
    }
    mmmu_one = mmmu_two_images | {"id": "v2", "question": "What is in <image 1>?", "image_2": None}
    converted, skipped = lmms_eval_records("mmmu", [mmmu_two_images, mmmu_one], tmp_path / "imgs")
    assert (
        skipped == 1
        and converted[0]["question"] == "What is in the image?"
        and converted[0]["choices"] == ["a", "b"]
    )
    [info], _ = lmms_eval_records(
        "infovqa",
        [{"questionId": 3, "question": "Q?", "answers": ["x", "y"], "image": image}],
        tmp_path / "imgs",
    )
    assert info["metric"] == "anls" and info["answer"] == ["x", "y"]
    with pytest.raises(ValueError, match="unknown lmms-eval task 'vqav2'"):
        lmms_eval_records("vqav2", [], tmp_path / "imgs")


def test_cli_converts_charts_and_rejects_bad_arguments(tmp_path, capsys):
    assert main(["convert", "charts", "--out", str(tmp_path / "charts.jsonl"), "--limit", "8"]) == 0
    records = load_records(tmp_path / "charts.jsonl")
    assert len(records) == 8 and {r.metric for r in records} <= {"relaxed", "exact"}
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "d.jsonl", "--out", "o", "--policies", "mai,gpt-4"])
    assert "unknown policy 'gpt-4'" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "no such dataset file" in capsys.readouterr().err


def test_cli_run_says_clearly_when_no_server_answers(tmp_path, capsys):
    data = write_lines(tmp_path / "d.jsonl", [rec("1", "exact")])
    assert main(["run", str(data), "--out", str(tmp_path / "o"), "--url", "http://127.0.0.1:9"]) == 2
    assert "no MAI server at http://127.0.0.1:9" in capsys.readouterr().err


# ---------------------------------------------------------------- fates of fault-injection requests


def test_fates_and_route_labels():
    from loadtest.fates import fate_of, route_label_is_true

    ok = {"trace": {"route": "transfer", "stages": [{"status": "ok"}, {"status": "ok"}]}}
    degraded = {
        "mai": {
            "trace": {"route": "degraded_large_only", "stages": [{"status": "timeout"}, {"status": "ok"}]}
        }
    }
    assert fate_of(200, {}, ok) == "answered" and fate_of(200, {}, degraded) == "degraded"
    assert fate_of(503, {"retry-after": "5"}, None) == "rejected_503"
    assert fate_of(503, {}, None) == "failed" and fate_of(500, {}, None) == "failed"
    assert fate_of(0, {}, None, timed_out=True) == "hung"
    assert route_label_is_true(ok["trace"]) and route_label_is_true(degraded["mai"]["trace"])
    assert not route_label_is_true({"route": "transfer", "stages": [{"status": "error"}]})
    assert not route_label_is_true({"route": "degraded_no_transfer", "stages": [{"status": "ok"}]})
    assert route_label_is_true(
        {"route": "agree_short", "stages": [{"status": "ok"}, {"status": "cancelled"}]}
    )


def test_a_run_can_be_a_policy_with_cascade_options():
    plain = RunSpec.parse("mai")
    assert (plain.name, plain.policy, plain.options) == ("mai", "mai", ())
    paper = RunSpec.parse("mai-paper=mai:min_confidence=0:transfer_form=according")
    assert (paper.name, paper.policy) == ("mai-paper", "mai")
    assert dict(paper.options) == {"min_confidence": 0, "transfer_form": "according"}
    record = EvalRecord.model_validate(rec("1", "exact"))
    body = chat_body(record, "data:,", paper.policy, transfer_selector="budget", options=dict(paper.options))
    assert body["model"] == "mai"
    assert body["mai"]["options"] == {
        "min_confidence": 0,
        "transfer_form": "according",
        "transfer_selector": "budget",
    }
    for bad in ("x=gpt-4", "bad name=mai", "m=mai:nokey", "m=mai:=1"):
        with pytest.raises(ValueError):
            RunSpec.parse(bad)
    args = build_parser().parse_args(
        ["run", "d.jsonl", "--out", "o", "--policies", "mai-paper=mai:min_confidence=0,mai"]
    )
    assert [run.name for run in args.policies] == ["mai-paper", "mai"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "d.jsonl", "--out", "o", "--policies", "mai,m=mai-large,mai"])


def test_the_validation_split_is_the_train_images_the_demo_models_never_saw():
    import easy_vqa

    from harness.datasets import easy_vqa_records
    from harness.easy_vqa import held_out_images

    _, _, image_ids = easy_vqa.get_train_questions()
    held_out = held_out_images(image_ids)
    validation = list(easy_vqa_records("validation"))
    indices = [int(record["id"].rsplit("-", 1)[1]) for record in validation]
    assert len(validation) == sum(image_id in held_out for image_id in image_ids) > 1000
    assert all(image_ids[index] in held_out for index in indices)
    assert len(held_out) == 400
    with pytest.raises(ValueError, match="split"):
        next(easy_vqa_records("dev"))


def test_the_balanced_yes_no_set_is_half_yes_on_the_splits_own_images():
    from collections import Counter

    from harness.datasets import easy_vqa_balanced_records

    test = list(easy_vqa_balanced_records("test", 400))
    assert len({record["id"] for record in test}) == 400
    assert {record["metric"] for record in test} == {"yes_no"}
    assert 0.42 < Counter(record["answer"] for record in test)["yes"] / 400 < 0.58
    assert [r["question"] for r in easy_vqa_balanced_records("test", 5)] == [r["question"] for r in test[:5]]
    with pytest.raises(ValueError, match="split"):
        next(easy_vqa_balanced_records("train"))


def test_summary_reports_the_prefix_cached_share_per_model_and_prompt_kind():
    records = [EvalRecord.model_validate(rec("1", "relaxed") | {"id": str(i)}) for i in range(2)]

    def cached(model, kind, prompt, hit):
        return stage(model, kind, 2) | {"prompt_tokens": prompt, "cached_tokens": hit}

    rows = {
        "0": answered(
            "0",
            "1",
            "transfer",
            1.0,
            [
                cached("small", "simple", 40, 0),
                cached("small", "reasoning", 50, 40),
                cached("large", "transfer", 100, 40),
            ],
        ),
        "1": answered(
            "1",
            "1",
            "transfer",
            1.0,
            # The second request's reasoning found all of its prefix; an engine that did not report
            # cached tokens (None) is left out of the share, not counted as a miss.
            [cached("small", "reasoning", 50, 50), stage("large", "transfer", 2) | {"prompt_tokens": 100}],
        ),
    }
    summary = summarize_policy("mai", records, rows, [])
    assert summary["cached_share_per_call"]["small"] == {"reasoning": 0.9, "simple": 0.0}
    assert summary["cached_share_per_call"]["large"] == {"transfer": 0.4}
    add_speedups({"mai": summary}, None)
    table = markdown({"mai": summary}, {"dataset": "d", "url": "u", "concurrency": 1, "baseline": None})
    assert "| mai | 0.0 % | 90.0 % | 40.0 % |" in table


def _answering(responses: list[tuple[int, object]]):
    """An httpx client whose server gives ``responses`` in turn (JSON bodies, or text), counting calls."""
    import httpx

    calls = []

    def handler(request):
        status, body = responses[min(len(calls), len(responses) - 1)]
        calls.append(request)
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://mai"), calls


def _ask_once(responses):
    import asyncio

    from evaluation.run import DriveSettings, ask

    record = EvalRecord(id="1", image="data:x", question="Is it red?", answer="yes", metric="yes_no")
    http, calls = _answering(responses)

    async def go():
        async with http:
            return await ask(http, record, "data:x", RunSpec.parse("mai"), DriveSettings(retries=2))

    return asyncio.run(go()), calls


ANSWER = {"choices": [{"message": {"content": "yes"}}], "mai": {"route": "agree_short", "trace": {}}}


def test_a_request_lost_with_a_dead_ingress_replica_is_asked_again(monkeypatch):
    monkeypatch.setattr("asyncio.sleep", _no_sleep)
    # Serve's proxy answers for a replica that died holding the request: a 500 that is not the app's JSON.
    row, calls = _ask_once([(500, "Internal Server Error"), (200, ANSWER)])
    assert len(calls) == 2 and row["status"] == 200 and row["answer"] == "yes"


def test_an_error_the_app_wrote_is_kept_not_retried(monkeypatch):
    monkeypatch.setattr("asyncio.sleep", _no_sleep)
    error = {"error": {"message": "the image is not an image", "code": "invalid_image"}}
    row, calls = _ask_once([(500, error), (200, ANSWER)])
    assert len(calls) == 1 and row["status"] == 500 and "not an image" in row["error"]


def test_a_record_whose_text_is_no_unicode_is_sent_and_its_400_kept():
    import asyncio
    import json

    from evaluation.run import DriveSettings, ask

    choices = ["red\ud800", "blue"]  # a question with a lone surrogate is no record (pydantic's str check)
    record = EvalRecord(
        id="1", image="data:x", question="Which?", choices=choices, answer="A", metric="option"
    )
    error = {"error": {"message": "mai.choices.0 is not valid Unicode text", "code": "invalid_text"}}
    http, calls = _answering([(400, error)])

    async def go():
        async with http:
            return await ask(http, record, "data:x", RunSpec.parse("mai"), DriveSettings(retries=2))

    row = asyncio.run(go())
    assert len(calls) == 1 and b'"red\\ud800"' in calls[0].content
    assert json.loads(calls[0].content)["mai"]["choices"] == choices
    assert row["status"] == 400 and "not valid Unicode" in row["error"]


async def _no_sleep(_seconds):
    return None


def test_a_calibration_run_asks_for_every_stages_confidence():
    """The replay compares the reasoning's answer confidence, which the server asks the engine for only
    under min_confidence: each calibration run asks for logprobs, which asks every stage."""
    import asyncio
    import json

    from evaluation.calibrate import CALIBRATION_RUNS, CALIBRATION_SPECS
    from evaluation.run import DriveSettings, ask

    assert [spec.name for spec in CALIBRATION_SPECS] == list(CALIBRATION_RUNS)
    record = EvalRecord(id="1", image="data:x", question="Is it red?", answer="yes", metric="yes_no")
    for spec, asked in ((CALIBRATION_SPECS[-1], True), (RunSpec.parse("mai-transfer"), False)):
        http, calls = _answering([(200, ANSWER)])

        async def go(spec=spec, http=http):
            async with http:
                return await ask(http, record, "data:x", spec, DriveSettings())

        asyncio.run(go())
        assert json.loads(calls[0].content).get("logprobs", False) is asked
