"""mai-batch's output side (batch/outputs.py, batch/tally.py): each row's output line in both formats,
the lines a rerun finds answered, a crash's partial last line cut before appending, and the tally the
progress bar and the summary show."""

import json

import pytest

from batch import outputs
from batch.inputs import InputFormat, LineError, OutputMismatchError, Request
from batch.outputs import (
    ForeignOutputError,
    LineWriter,
    answered_ids,
    done_lines,
    drop_errors,
    drop_partial_last_line,
    fault_of,
    line_of,
    openai_error_line,
    openai_reply_line,
    output_file,
    record_error_line,
    record_reply_line,
)
from batch.tally import Tally, summary_text
from evaluation.predictions import prediction_of
from evaluation.records import EvalRecord

OPENAI, RECORDS = InputFormat.OPENAI, InputFormat.RECORDS
RECORD = EvalRecord.model_validate(
    {
        "id": "r1",
        "image": "data:image/png;base64,AA==",
        "question": "Is it red?",
        "answer": "yes",
        "metric": "exact",
    }
)
COMPLETION = {
    "object": "chat.completion",
    "choices": [{"message": {"role": "assistant", "content": "Yes"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1},
    "mai": {"route": "agree_short", "trace": {"plan": "sequential", "kind": "yes_no", "stages": []}},
}


def openai_row(line: int) -> str:
    request = Request(row_id=f"q{line}", body={"model": "mai"}, request_id=f"batch.mai.q{line}")
    return json.dumps(openai_reply_line(line, request, 200, COMPLETION))


def record_row(line: int) -> str:
    request = Request(row_id="r1", body={}, request_id="batch.mai.r1", record=RECORD)
    return json.dumps(record_reply_line(line, request, "mai", 200, 0.1, COMPLETION))


# --- output lines ------------------------------------------------------------------------------------


def test_an_openai_reply_line_carries_the_response_under_the_lines_id():
    request = Request(row_id="q1", body={"model": "mai"}, request_id="batch.mai.q1")
    refused = {"error": {"message": "model 'gpt-9' is not served", "code": "model_not_found"}}
    assert openai_reply_line(7, request, 404, refused) == {
        "id": "batch_req_7",
        "custom_id": "q1",
        "response": {"status_code": 404, "request_id": "batch.mai.q1", "body": refused},
        "error": None,
    }


def test_an_openai_error_line_has_no_response_and_the_errors_code_and_message():
    error = LineError("line 3 repeats the id of line 1: each row needs its own", code="duplicate_id")
    assert openai_error_line(3, "q1", error) == {
        "id": "batch_req_3",
        "custom_id": "q1",
        "response": None,
        "error": {"code": "duplicate_id", "message": error.message},
    }
    assert openai_error_line(4, None, LineError("line 4 is not JSON"))["custom_id"] is None


@pytest.mark.parametrize(
    ("status", "body"), [(200, COMPLETION), (503, {"error": {"message": "large model unavailable"}})]
)
def test_a_record_reply_line_is_mai_evals_prediction_with_its_input_line(status, body):
    request = Request(row_id="r1", body={}, request_id="batch.mai.r1", record=RECORD)
    row = record_reply_line(9, request, "mai", status, 0.25, body)
    assert row == prediction_of(RECORD, "mai", status, 0.25, body) | {"line": 9}
    assert line_of(row, RECORDS) == 9 and row["id"] == "r1" and row["status"] == status
    if status == 200:
        assert row["answer"] == "Yes" and row["score"] == 1.0 and row["route"] == "agree_short"
    else:
        assert row["error"] == "large model unavailable"


def test_a_record_error_line_is_a_400_prediction_named_by_its_id_or_its_line():
    error = LineError("line 4: question: Field required")
    row = record_error_line(4, "r4", "mai", error)
    assert row == {
        "id": "r4",
        "policy": "mai",
        "status": 400,
        "latency_s": 0.0,
        "error": error.message,
        "line": 4,
    }
    assert record_error_line(5, None, "transfer", error)["id"] == "line-5"


@pytest.mark.parametrize(
    ("row", "line"),
    [
        ({"id": "batch_req_12"}, 12),
        ({"id": "batch_req_1", "line": 99}, 1),
        ({"id": "batch_req_"}, None),
        ({"id": "batch_req_x1"}, None),
        ({"id": "batch_req_0"}, None),
        ({"id": "req_1"}, None),
        ({"id": "batch_req_1 "}, None),
        ({"custom_id": "batch_req_1"}, None),
        ({"line": 3}, None),
    ],
)
def test_an_openai_output_line_names_its_input_line_in_its_id(row, line):
    assert line_of(row, OPENAI) == line


@pytest.mark.parametrize(
    ("row", "line"),
    [
        ({"id": "r1", "line": 4}, 4),
        ({"id": "batch_req_4"}, None),
        ({"line": "4"}, None),
        ({"line": True}, None),
        ({"line": 0}, None),
        ({"line": None}, None),
    ],
)
def test_a_record_output_line_names_its_input_line_in_line(row, line):
    assert line_of(row, RECORDS) == line


def test_openai_lines_go_to_the_output_and_records_to_the_policys_predictions(tmp_path):
    assert output_file(tmp_path / "out.jsonl", OPENAI, "mai") == tmp_path / "out.jsonl"
    assert (
        output_file(tmp_path / "out", RECORDS, "transfer")
        == tmp_path / "out" / "predictions" / "transfer.jsonl"
    )


# --- resuming ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "row"), [(OPENAI, openai_row), (RECORDS, record_row)])
def test_done_lines_are_the_answered_lines_past_a_partial_one(tmp_path, fmt, row):
    path = tmp_path / "out.jsonl"
    text = "\n".join([row(1), row(3), row(8), row(3)])
    path.write_text(text + "\n" + row(11)[:20])
    assert done_lines(path, fmt) == {1, 3, 8}
    assert done_lines(tmp_path / "none.jsonl", fmt) == set()


@pytest.mark.parametrize(("fmt", "row"), [(OPENAI, openai_row), (RECORDS, record_row)])
def test_every_kind_of_line_the_writers_write_is_an_output_line(fmt, row):
    request = Request(row_id="q1", body={}, request_id="batch.mai.q1", record=RECORD)
    error = LineError("line 2 is not JSON", code="invalid_json")
    written = (
        [openai_reply_line(1, request, 404, {"error": {}}), openai_error_line(2, None, error)]
        if fmt is OPENAI
        else [
            record_reply_line(1, request, "mai", 503, 0.5, {"error": {}}),
            record_error_line(2, None, "mai", error),
        ]
    )
    assert [fault_of(json.loads(json.dumps(line)), fmt) for line in [*written, json.loads(row(3))]] == [
        None
    ] * 3
    other = InputFormat.RECORDS if fmt is OPENAI else OPENAI
    assert fault_of(json.loads(row(3)), other) is not None  # the other format's line is not one


@pytest.mark.parametrize("fmt", [OPENAI, RECORDS])
@pytest.mark.parametrize("cut", [1, 5, 9, 17, 40, -1])
def test_a_partial_last_line_is_cut_and_only_it(tmp_path, fmt, cut):
    row = openai_row if fmt is OPENAI else record_row
    path = tmp_path / "out.jsonl"
    whole = row(1) + "\n" + row(2) + "\n"
    path.write_text(whole + row(3)[:cut])
    assert drop_partial_last_line(path, fmt) is True
    assert path.read_text() == whole
    assert drop_partial_last_line(path, fmt) is False and path.read_text() == whole


def test_the_last_line_is_found_across_read_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "CHUNK_BYTES", 3)
    path = tmp_path / "out.jsonl"
    whole = openai_row(1) + "\n" + openai_row(2) + "\n"
    path.write_text(whole + openai_row(3)[:-7])
    assert drop_partial_last_line(path, OPENAI) is True and path.read_text() == whole


def test_a_file_of_one_partial_line_is_emptied_and_an_empty_or_missing_one_left(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "batch_r')
    assert drop_partial_last_line(path, OPENAI) is True and path.read_bytes() == b""
    assert drop_partial_last_line(path, OPENAI) is False and path.exists()
    missing = tmp_path / "none.jsonl"
    assert drop_partial_last_line(missing, OPENAI) is False and not missing.exists()


def test_the_writer_appends_on_a_line_of_its_own_after_a_partial_one(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text(openai_row(1) + "\n" + openai_row(2)[:10])
    writer = LineWriter(path, OPENAI)
    writer.write([openai_row(2), openai_row(3)])
    assert path.read_text() == "".join(openai_row(n) + "\n" for n in (1, 2, 3))  # flushed before close
    writer.write([])
    writer.close()
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == [
        "batch_req_1",
        "batch_req_2",
        "batch_req_3",
    ]


def test_the_writer_makes_the_predictions_folder(tmp_path):
    path = tmp_path / "out" / "predictions" / "mai.jsonl"
    writer = LineWriter(path, RECORDS)
    writer.write([record_row(1)])
    writer.close()
    assert done_lines(path, RECORDS) == {1}


def test_a_row_counted_done_is_still_in_the_output_once_the_writer_opens_it(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text(openai_row(1) + "\n" + openai_row(2))  # the last line whole but for its newline
    done = done_lines(path, OPENAI)
    LineWriter(path, OPENAI).close()
    assert done <= done_lines(path, OPENAI)


# --- a file mai-batch did not write --------------------------------------------------------------------


def foreign_files() -> list:
    """(name, bytes of a file mai-batch did not write, the format it is taken as)."""
    deep = b'{"id": "batch_req_1", "custom_id": "q1", "response": ' + b"[" * 100_000
    cases = {
        "plain-text": (b"Dear diary,\nnothing happened today.\n", OPENAI),
        "plain-text-no-newline": (b"my only copy of the notes", OPENAI),
        "an-input-file": (json.dumps({"custom_id": "q1", "body": {"model": "mai"}}).encode() + b"\n", OPENAI),
        "other-json": (b'{"id": "batch_req_1", "custom_id": "q1"}\n{"x": 1}\n', OPENAI),
        "a-list": (b"[1, 2]\n", RECORDS),
        "records-as-openai": (record_row(1).encode() + b"\n", OPENAI),
        "openai-as-records": (openai_row(1).encode() + b"\n", RECORDS),
        "broken-mid-file": (f"{openai_row(1)}\n{{broken\n{openai_row(2)}\n".encode(), OPENAI),
        "foreign-then-partial": (f"notes\n{openai_row(2)[:30]}".encode(), OPENAI),
        "binary": (bytes(range(256)) * 4, OPENAI),
        "not-utf8": (b'{"id": "batch_req_1", "custom_id": "\xff"}\n', OPENAI),
        "nested-past-recursion": (deep + b"\n", OPENAI),
        "partial-of-another-start": (b'{"custom_id": "q1", "resp', OPENAI),
        "a-blank-line": (f"{openai_row(1)}\n\n{openai_row(2)}\n".encode(), OPENAI),
        "a-blank-last-line": (f"{record_row(1)}\n\n".encode(), RECORDS),
        "a-line-of-spaces": (f"{openai_row(1)}\n \t\r\n{openai_row(2)}\n".encode(), OPENAI),
        "spaces-without-a-newline": (f"{openai_row(1)}\n  ".encode(), OPENAI),
        "a-string": (f'{openai_row(1)}\n"batch_req_2"\n'.encode(), OPENAI),
    }
    return [pytest.param(data, fmt, id=name) for name, (data, fmt) in cases.items()]


@pytest.mark.parametrize(("data", "fmt"), foreign_files())
def test_a_file_mai_batch_did_not_write_is_refused_and_left_as_it_is(tmp_path, data, fmt):
    path = tmp_path / "notes.jsonl"
    path.write_bytes(data)
    for use in (done_lines, answered_ids, drop_partial_last_line, LineWriter, drop_errors):
        with pytest.raises(ForeignOutputError, match=f"is no mai-batch output: line \\d+ of {path}"):
            use(path, fmt)
        assert path.read_bytes() == data
    assert sorted(tmp_path.iterdir()) == [path]  # no file beside it either


def test_a_line_longer_than_an_output_line_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "OUTPUT_LINE_BYTES", 64)
    path = tmp_path / "out.jsonl"
    path.write_text(openai_row(1) + "\n")
    with pytest.raises(ForeignOutputError, match="line 1 .* bytes, over the 64 of an output line"):
        done_lines(path, OPENAI)


@pytest.mark.parametrize("client_errors", [False, True])
def test_a_blank_line_is_refused_by_name_on_resume_and_retry_alike(tmp_path, client_errors):
    path = tmp_path / "out.jsonl"
    data = f"{openai_row(1)}\n{openai_row(2)}\n\n{openai_row(3)}\n".encode()
    path.write_bytes(data)
    blank = f"line 3 of {path} is blank .*nothing was changed: delete it, or choose another --output"
    with pytest.raises(ForeignOutputError, match=blank):
        drop_errors(path, OPENAI, client_errors=client_errors)
    with pytest.raises(ForeignOutputError, match=blank):
        LineWriter(path, OPENAI)
    assert path.read_bytes() == data


def replied(line: int, status: int) -> dict:
    """An OpenAI output line of a request the server answered with ``status``."""
    request = Request(row_id=f"q{line}", body={"model": "mai"}, request_id=f"batch.mai.q{line}")
    return openai_reply_line(line, request, status, {} if status != 200 else COMPLETION)


def test_retrying_errors_takes_out_their_lines_and_copies_the_others_byte_for_byte(tmp_path):
    path = tmp_path / "out.jsonl"
    kept = [
        json.dumps(replied(1, 200)).replace(", ", ",\r ") + "\r\n",  # \r as JSON's whitespace, and a CRLF
        json.dumps(replied(3, 400), ensure_ascii=False) + "\n",
        json.dumps(replied(4, 200) | {"custom_id": "q4 \u00e9\u4e2d\U0001f600"}, ensure_ascii=False) + "\n",
    ]
    failed = [json.dumps(replied(2, 503)) + "\n", json.dumps(replied(5, 504)) + "\n"]
    path.write_bytes("".join([kept[0], failed[0], kept[1], kept[2], failed[1]]).encode())
    assert drop_errors(path, OPENAI) == {2, 5}
    assert path.read_bytes() == "".join(kept).encode()
    assert sorted(tmp_path.iterdir()) == [path]
    assert drop_errors(path, OPENAI) == frozenset() and path.read_bytes() == "".join(kept).encode()


def test_the_refusal_names_the_line_and_its_fault(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text(openai_row(1) + "\n" + json.dumps({"id": "batch_req_2", "custom_id": "q2"}) + "\n")
    with pytest.raises(ForeignOutputError, match="line 2 of .* has neither a response nor an error"):
        done_lines(path, OPENAI)
    assert issubclass(ForeignOutputError, OutputMismatchError)  # the command's exit code 2


# --- tally -------------------------------------------------------------------------------------------


def tally_of(*rows: tuple, skipped: int = 0) -> Tally:
    """Rows as (status, route, node[, attempts]): the answered ones used the small model, transfer the
    large one too."""
    tally = Tally(skipped=skipped)
    for status, route, node, *attempts in rows:
        tokens = {"small": {"prompt_tokens": 10, "completion_tokens": 2}} if status == 200 else {}
        if route == "transfer":
            tokens |= {"large": {"prompt_tokens": 30, "completion_tokens": 3}}
        tally.add(status, route, tokens, node, *attempts)
    return tally


A, B = "node-aaaaaaaaaaaaaaaa", "node-bbbbbbbbbbbbbbbb"
ROWS = [
    (200, "agree_short", A),
    (200, "transfer", A, 3),  # answered after two failed attempts
    (400, None, B, 0),  # a line that was no request: never asked
    (200, "agree_short", A, 1),
    (503, None, B, 6),  # failed every attempt
    (200, "agree_short", A),
]


def test_the_tally_counts_rows_errors_retries_routes_tokens_and_nodes():
    tally = tally_of(*ROWS, skipped=4)
    assert tally.rows == 6 and tally.errors == 2 and tally.skipped == 4 and tally.retried == 2
    assert tally.statuses == {200: 4, 400: 1, 503: 1} and tally.routes == {"agree_short": 3, "transfer": 1}
    assert tally.tokens == {
        "small": {"prompt_tokens": 40, "completion_tokens": 8},
        "large": {"prompt_tokens": 30, "completion_tokens": 3},
    }
    assert tally.nodes == {A: 4, B: 2}


def test_route_shares_are_of_the_routed_rows_commonest_first():
    assert tally_of(*ROWS).route_shares() == "agree_short 75% · transfer 25%"
    shares = tally_of(
        (200, "transfer", "n"), (200, "agree_short", "n"), (200, "transfer", "n")
    ).route_shares()
    assert shares == "transfer 67% · agree_short 33%"
    assert tally_of((503, None, "n")).route_shares() == "" and Tally().route_shares() == ""


def test_the_summary_has_every_count_and_the_rate():
    summary = json.loads(json.dumps(tally_of(*ROWS, skipped=4).summary(2.4)))
    assert summary == {
        "rows": 6,
        "skipped_as_done": 4,
        "answered": 4,
        "errors": 2,
        "retried": 2,
        "statuses": {"200": 4, "400": 1, "503": 1},
        "routes": {"agree_short": 3, "transfer": 1},
        "tokens": {
            "large": {"prompt_tokens": 30, "completion_tokens": 3},
            "small": {"prompt_tokens": 40, "completion_tokens": 8},
        },
        "rows_per_node": {A: 4, B: 2},
        "wall_s": 2.4,
        "rows_per_s": 2.5,
        "actor_peak_rss_mb": 0.0,
    }
    assert list(summary["tokens"]) == ["large", "small"]
    assert list(summary["routes"]) == ["agree_short", "transfer"]


def test_a_summary_without_time_has_no_rate():
    summary = Tally().summary(0.0)
    assert summary["rows"] == 0 and summary["rows_per_s"] is None and summary["answered"] == 0
    assert summary_text(summary) == "0 rows in 0.0 s (0.00 rows/s): 0 answered, 0 errors"


def test_the_summary_text_shows_counts_routes_tokens_and_nodes():
    text = summary_text(tally_of(*ROWS, skipped=4).summary(2.4)).splitlines()
    assert text[0] == (
        "6 rows in 2.4 s (2.50 rows/s): 4 answered, 2 errors, 2 asked again after a model failed, "
        "4 done before"
    )
    assert text[1] == "routes: agree_short 3, transfer 1"
    assert text[2:4] == [
        "large tokens: prompt_tokens 30, completion_tokens 3",
        "small tokens: prompt_tokens 40, completion_tokens 8",
    ]
    assert text[4] == "rows per node: node-aaaaaaa 4, node-bbbbbbb 2"
    assert len(text) == 5


def test_the_summary_text_of_one_node_no_retry_and_no_earlier_run_says_none_of_them():
    text = summary_text(tally_of((200, "agree_short", "n1"), (200, "agree_short", "n1", 1)).summary(1.0))
    assert text.splitlines() == [
        "2 rows in 1.0 s (2.00 rows/s): 2 answered, 0 errors",
        "routes: agree_short 2",
        "small tokens: prompt_tokens 20, completion_tokens 4",
    ]
