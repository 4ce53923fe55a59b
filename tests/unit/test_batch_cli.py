"""mai-batch's command (batch/cli.py, batch/runner.py's prepare, batch/settings.py): what the job cannot
start with is one line on stderr and exit code 2 before Ray starts, a finished output is said so, and a
batch row runs under the server's config without overload bending or stage timeouts."""

import contextlib
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
import yaml

from batch.cli import EXIT_USAGE, main, read_config
from batch.inputs import InputFormat, LineError, RecordSettings
from batch.outputs import openai_error_line, record_error_line
from batch.runner import BatchJob, prepare
from batch.settings import BatchSettings, batch_config, capacity, rows_per_actor
from batch.tally import Tally
from serve_app.core.contracts import StageTimeouts

from ..images import data_url

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "mai-cpu.yaml"  # its models' sources are folders under the repository's root


@pytest.fixture(scope="module")
def cpu_config():
    with contextlib.chdir(ROOT):
        return read_config(str(CONFIG), None)


class RayStarted(Exception):
    """Raised in place of ``ray.init``: the command went past its checks."""


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.chdir(ROOT)

    def init(*args, **kwargs):
        raise RayStarted

    monkeypatch.setattr(ray, "init", init)
    yield
    assert not ray.is_initialized()


# --- settings ----------------------------------------------------------------------------------------


def sized(config, small: tuple[int, int], large: tuple[int, int]):
    """``config`` with each model's (max_ongoing_requests, autoscaling.max_replicas)."""

    def spec(model, ongoing, replicas):
        autoscaling = model.autoscaling.model_copy(update={"max_replicas": replicas})
        return model.model_copy(update={"max_ongoing_requests": ongoing, "autoscaling": autoscaling})

    return config.model_copy(
        update={"small": spec(config.small, *small), "large": spec(config.large, *large)}
    )


@pytest.mark.parametrize(
    ("small", "large", "rows"), [((16, 3), (8, 2), 16), ((4, 2), (16, 2), 8), ((5, 4), (7, 3), 20)]
)
def test_capacity_is_the_fewer_requests_in_flight_of_the_two_models(cpu_config, small, large, rows):
    assert capacity(sized(cpu_config, small, large)) == rows


def test_the_cpu_configs_capacity_is_its_models_requests_in_flight(cpu_config):
    document = yaml.safe_load(CONFIG.read_text())["applications"][0]["args"]
    expected = min(
        document[role]["max_ongoing_requests"] * document[role]["autoscaling"]["max_replicas"]
        for role in ("small", "large")
    )
    assert capacity(cpu_config) == expected


@pytest.mark.parametrize(
    ("actors", "in_flight", "per_actor"), [(1, None, 48), (3, None, 16), (5, None, 10), (4, 10, 3), (5, 2, 1)]
)
def test_the_rows_in_flight_are_split_between_the_actors(cpu_config, actors, in_flight, per_actor):
    config = sized(cpu_config, (16, 3), (24, 2))
    assert rows_per_actor(BatchSettings(actors=actors, rows_in_flight=in_flight), config) == per_actor
    total = in_flight or capacity(config)
    assert per_actor * actors >= total  # every row in flight has an actor's slot


def test_a_batch_row_runs_without_overload_bending_or_stage_timeouts(cpu_config):
    bending = cpu_config.cascade.overload.model_copy(update={"max_large_queue": 12, "relax_after_s": 3.0})
    timeouts = StageTimeouts(short_s=5, explain_s=6, reasoning_s=7, stage2_s=8, transfer_s=9)
    cascade = cpu_config.cascade.model_copy(update={"overload": bending, "timeouts": timeouts})
    online = cpu_config.model_copy(update={"cascade": cascade})
    batched = batch_config(online, BatchSettings(row_timeout_s=42.0))

    assert batched.cascade.overload.max_large_queue is None and not batched.cascade.overload.enabled
    assert batched.cascade.overload.relax_after_s == 3.0
    assert all(value is None for value in batched.cascade.timeouts.model_dump().values())
    assert batched.request_timeout_s == 42.0 and batched.readiness.wait_s == 42.0
    # What else the server does, a row does too.
    assert batched.cascade.audit == online.cascade.audit and batched.cascade.audit.rate > 0
    assert batched.cascade.adaptive == online.cascade.adaptive and batched.cascade.adaptive.mode == "learn"
    assert batched.cascade.min_confidence == online.cascade.min_confidence
    assert batched.cascade.confident_large == online.cascade.confident_large is not None
    assert batched.cascade.max_tokens == online.cascade.max_tokens
    assert (batched.small, batched.large, batched.limits) == (online.small, online.large, online.limits)
    # The config given is left as it was.
    assert online.cascade.overload.max_large_queue == 12 and online.cascade.timeouts == timeouts
    assert online.request_timeout_s == cpu_config.request_timeout_s == 120


def test_the_batch_config_of_the_cpu_config_is_a_valid_config(cpu_config):
    batched = batch_config(cpu_config, BatchSettings(row_timeout_s=3600))
    assert type(batched).model_validate(batched.model_dump()) == batched
    assert cpu_config.readiness.wait_s == 30.0  # the online wait, unchanged


def test_the_cpu_config_as_read_is_its_validated_application(cpu_config):
    assert cpu_config.small.model_id == "demo-small" and cpu_config.large.model_id == "demo-large"
    assert cpu_config.limits.max_prompt_bytes is not None  # completed from the models


# --- exit code 2 before any engine ---------------------------------------------------------------------


def openai_text(*custom_ids: str) -> str:
    line = {"method": "POST", "url": "/v1/chat/completions", "body": {"model": "mai", "messages": []}}
    return "".join(json.dumps({"custom_id": i} | line) + "\n" for i in custom_ids)


def records_text(*ids: str) -> str:
    record = {"image": data_url(), "question": "Is it red?", "answer": "yes", "metric": "exact"}
    return "".join(json.dumps({"id": i} | record) + "\n" for i in ids)


def answered(line: int, custom_id: str | None) -> str:
    """An OpenAI output line as mai-batch writes it: a line that was no request."""
    return json.dumps(openai_error_line(line, custom_id, LineError(f"line {line}: no request"))) + "\n"


def predicted(line: int, record_id: str) -> str:
    """A records output line as mai-batch writes it."""
    return json.dumps(record_error_line(line, record_id, "transfer", LineError("no request"))) + "\n"


def written(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def without_job(err: str) -> str:
    """The command's stderr with its start line's job id left out (a new one each run)."""
    return re.sub(r"^mai-batch: job [0-9a-f]{32}: ", "mai-batch: ", err, flags=re.MULTILINE)


def bad_key_config(tmp: Path) -> str:
    document = yaml.safe_load(CONFIG.read_text())
    document["applications"][0]["args"]["cascade"]["bogus_threshold"] = 1
    return written(tmp / "bad.yaml", yaml.safe_dump(document))


def requests(tmp: Path) -> str:
    return written(tmp / "in.jsonl", openai_text("a", "b"))


NOT_YAML = "applications: [\n - {name: a"


def not_yaml(t: Path) -> list[str]:
    return [requests(t), "--output", f"{t}/out.jsonl", "--config", written(t / "c.yaml", NOT_YAML)]


def output_folder(t: Path) -> list[str]:
    return [requests(t), "--output", str(t)]


def usage_cases() -> list:
    """(argv of a tmp folder, what the one line names), by case."""
    out = ["--output", "{tmp}/out.jsonl"]
    cases = {
        "missing-config": (lambda t: [requests(t), *out, "--config", f"{t}/none.yaml"], "No such file"),
        "not-yaml": (not_yaml, "is not YAML"),
        "no-applications": (
            lambda t: [requests(t), *out, "--config", written(t / "c.yaml", "small: {}\n")],
            "no applications list",
        ),
        "invalid-key": (lambda t: [requests(t), *out, "--config", bad_key_config(t)], "bogus_threshold"),
        "no-such-app": (lambda t: [requests(t), *out, "--app-name", "other"], "--app-name"),
        "missing-input": (lambda t: [f"{t}/none.jsonl", *out], "input {tmp}/none.jsonl:"),
        "empty-input": (lambda t: [written(t / "in.jsonl", "\n  \n"), *out], "no lines"),
        "undetectable-input": (
            lambda t: [written(t / "in.jsonl", '{"prompt": "hi"}\n' + openai_text("a")), *out],
            "line 1 is neither",
        ),
        "policy-for-openai": (lambda t: [requests(t), *out, "--policy", "transfer"], "--policy"),
        "option-for-openai": (
            lambda t: [requests(t), *out, "--option", "transfer_selector=budget"],
            "--option",
        ),
        "bad-option": (lambda t: [requests(t), *out, "--option", "transfer_selector"], "is not KEY=VALUE"),
        "no-actors": (lambda t: [requests(t), *out, "--actors", "0"], "actors"),
        "unknown-key-name": (
            lambda t: [requests(t), *out, "--key-name", "nobody"],
            "--key-name: no configured API key is named 'nobody'",
        ),
        "no-row-time": (lambda t: [requests(t), *out, "--row-timeout", "0"], "row_timeout_s"),
        "output-folder": (output_folder, "--output {tmp} is a folder"),
        "small-max-line-bytes": (lambda t: [requests(t), *out, "--max-line-bytes", "10"], "max_line_bytes"),
        "image-root-for-openai": (lambda t: [requests(t), *out, "--image-root", str(t)], "--image-root"),
        "image-root-no-folder": (
            lambda t: [requests(t), *out, "--image-root", f"{t}/none"],
            "--image-root {tmp}/none is not a folder",
        ),
        "first-line-too-long": (
            lambda t: [written(t / "in.jsonl", " " * 2000 + "x\n"), *out, "--max-line-bytes", "1024"],
            "line 1 has 2001 bytes, over the limit of 1024 (--max-line-bytes)",
        ),
        "malformed-cache-url": (
            lambda t: [requests(t), *out, "--cache", "http://:pw@cache:6379"],
            "cache.url 'http://***@cache:6379' has scheme 'http'",
        ),
        "first-line-too-deep": (
            lambda t: [written(t / "in.jsonl", "[" * 1000 + "]" * 1000 + "\n"), *out],
            "nests more than 32 levels deep",
        ),
    }
    return [
        pytest.param(
            *case,
            id=name,
        )
        for name, case in cases.items()
    ]


@pytest.mark.parametrize(("argv_of", "names"), usage_cases())
def test_what_the_job_cannot_start_with_is_one_line_and_exit_code_2(no_ray, tmp_path, capsys, argv_of, names):
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv_of(tmp_path)]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("mai-batch: ") and captured.err.endswith("\n")
    assert captured.err.count("\n") == 1, captured.err
    assert names.replace("{tmp}", str(tmp_path)) in captured.err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("argv_of", [not_yaml, output_folder])
def test_a_config_that_is_not_yaml_and_a_folder_output_end_with_exit_code_2(
    no_ray, tmp_path, capsys, argv_of
):
    assert main(argv_of(tmp_path)) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("mai-batch: ")


def test_a_records_folder_of_another_dataset_is_refused(no_ray, tmp_path, capsys):
    first = written(tmp_path / "a.jsonl", records_text("r1", "r2"))
    other = written(tmp_path / "b.jsonl", records_text("s1"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(
        json.dumps({"dataset": first, "dataset_sha256": "0" * 64, "records": 2})
    )
    assert main([other, "--output", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another dataset" in err


# --- an output mai-batch did not write ---------------------------------------------------------------


FOREIGN = {
    "plain-text": b"Meeting notes\n- buy milk\nno newline at the end",
    "one-line-no-newline": b"my only copy",
    "an-input-file": openai_text("a", "b").encode(),
    "other-json": b'{"id": "batch_req_1", "custom_id": "a"}\n',
}


@pytest.mark.parametrize("data", FOREIGN.values(), ids=FOREIGN.keys())
def test_an_output_mai_batch_did_not_write_is_refused_and_left_byte_identical(no_ray, tmp_path, capsys, data):
    source = written(tmp_path / "in.jsonl", openai_text("a", "b"))
    out = tmp_path / "notes.txt"
    out.write_bytes(data)
    assert main([source, "--output", str(out), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"mai-batch: --output {out} is no mai-batch output: line ")
    assert "choose another --output" in err
    assert out.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == [
        "in.jsonl",
        "notes.txt",
    ]


def test_a_records_folder_whose_predictions_mai_batch_did_not_write_is_refused(no_ray, tmp_path, capsys):
    source = written(tmp_path / "data.jsonl", records_text("r1", "r2"))
    predictions = tmp_path / "out" / "predictions" / "mai.jsonl"
    predictions.parent.mkdir(parents=True)
    predictions.write_bytes(b"id,answer\nr1,yes")
    assert main([source, "--output", str(tmp_path / "out")]) == EXIT_USAGE
    assert f"line 1 of {predictions} is not JSON" in capsys.readouterr().err
    assert predictions.read_bytes() == b"id,answer\nr1,yes"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["predictions"]  # no manifest written


# --- what is left to do ------------------------------------------------------------------------------


def test_an_output_that_answers_every_row_ends_the_job_before_ray(no_ray, tmp_path, capsys):
    source = written(tmp_path / "in.jsonl", openai_text("a") + "\n" + openai_text("b", "c"))  # lines 1, 3, 4
    out = tmp_path / "out.jsonl"
    answers = {4: "c", 1: "a", 3: "b"}
    out.write_text("".join(answered(n, i) for n, i in answers.items()))
    assert main([source, "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"mai-batch: every one of the 3 rows is in {out} already\n"


def test_a_records_folder_that_answers_every_record_ends_the_job_before_ray(no_ray, tmp_path, capsys):
    source = written(tmp_path / "data.jsonl", records_text("r1", "r2"))
    out = tmp_path / "out"
    predictions = out / "predictions" / "transfer.jsonl"
    predictions.parent.mkdir(parents=True)
    predictions.write_text(predicted(1, "r1") + predicted(2, "r2"))
    assert main([source, "--output", str(out), "--policy", "transfer"]) == 0
    assert "every one of the 2 rows" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["records"] == 2


def test_rows_left_to_answer_are_counted_and_only_then_ray_starts(no_ray, tmp_path, capsys):
    source = written(tmp_path / "in.jsonl", openai_text("a", "b", "c"))
    out = tmp_path / "out.jsonl"
    out.write_text(answered(2, "b") + '{"id": "batch_req_3", "cus')
    with pytest.raises(RayStarted):
        main([source, "--output", str(out), "--no-progress"])
    assert (
        without_job(capsys.readouterr().err)
        == f"mai-batch: 2 rows to answer (openai, 1 done before) -> {out}\n"
    )


def test_the_start_line_and_the_summary_name_the_jobs_id_new_each_run(monkeypatch, tmp_path, capsys):
    """An operator finds a job's rows in the tracing system by ``mai.batch.job_id``: the command says
    the id as it starts, and the summary it prints ends with it."""
    import batch.cli

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: None)
    ran: list[str] = []

    def run(job, prepared, on_progress=None):
        ran.append(job.job_id)
        return Tally().summary(1.0) | {"job_id": job.job_id}

    monkeypatch.setattr(batch.cli, "run", run)
    source = written(tmp_path / "in.jsonl", openai_text("a"))
    for _ in range(2):
        assert main([source, "--output", str(tmp_path / "out.jsonl"), "--no-progress"]) == 0
        captured = capsys.readouterr()
        assert captured.err.startswith(f"mai-batch: job {ran[-1]}: 1 rows to answer (openai)")
        assert captured.out.splitlines()[-1] == f"job {ran[-1]} (its rows' traces: mai.batch.job_id)"
    assert len(set(ran)) == 2 and all(re.fullmatch(r"[0-9a-f]{32}", job_id) for job_id in ran)


def test_the_jobs_id_reaches_its_rows_and_its_summary_file(no_ray, monkeypatch, tmp_path, cpu_config):
    """``run`` hands the job's id to the actors' rows (``RowJob.job_id``, each row's span) and writes
    it in the summary, without Ray: no model started, no line read (Ray Data's reader would start
    Ray), no row answered."""
    import batch.model_tier
    import batch.runner
    import batch.source
    from batch.runner import run, summary_path

    handed: list = []

    def answered_rows(source, actor_args, **kwargs):
        handed.append(actor_args[2])  # (the batch config, the targets, the RowJob)
        return SimpleNamespace(iter_batches=lambda **kwargs: iter(()), stats=lambda: None)

    monkeypatch.setattr(batch.model_tier, "start", lambda apps: SimpleNamespace(ledger=None))
    monkeypatch.setattr(batch.model_tier, "stop", lambda targets: None)
    monkeypatch.setattr(batch.runner, "answered_rows", answered_rows)
    monkeypatch.setattr(batch.source, "NumberedLines", lambda shards, **kwargs: None)
    source = written(tmp_path / "in.jsonl", openai_text("a"))
    job = BatchJob(input=source, output=tmp_path / "out.jsonl", config=cpu_config)
    summary = run(job, prepare(job), apps={})
    assert handed and {row_job.job_id for row_job in handed} == {job.job_id}
    assert summary["job_id"] == job.job_id
    assert json.loads(summary_path(job.output, InputFormat.OPENAI).read_text())["job_id"] == job.job_id


def test_a_format_given_reads_a_first_line_of_neither_as_a_row(no_ray, tmp_path, capsys):
    source = written(tmp_path / "in.jsonl", '{"prompt": "hi"}\n' + openai_text("a"))
    with pytest.raises(RayStarted):
        main([source, "--output", str(tmp_path / "out.jsonl"), "--format", "openai", "--no-progress"])
    assert "2 rows to answer (openai)" in capsys.readouterr().err


def test_only_the_inputs_own_lines_count_as_done(cpu_config, tmp_path):
    source = written(tmp_path / "in.jsonl", openai_text("a", "b"))  # once three lines, the second blank
    out = tmp_path / "out.jsonl"
    out.write_text(answered(1, None) + answered(3, None))
    job = BatchJob(input=source, output=out, config=cpu_config, records=RecordSettings())
    prepared = prepare(job)
    assert prepared.scan.fmt is InputFormat.OPENAI and prepared.scan.rows == 2
    assert prepared.todo == 1  # line 2 has no answer


def test_lines_past_a_limit_are_rows_with_no_id(no_ray, tmp_path, capsys):
    text = openai_text("a") + " " * 3000 + "x\n" + "[" * 1000 + "\n" + openai_text("b")
    source = written(tmp_path / "in.jsonl", text)
    with pytest.raises(RayStarted):
        main([source, "--output", str(tmp_path / "out.jsonl"), "--max-line-bytes", "2048", "--no-progress"])
    assert "4 rows to answer (openai)" in capsys.readouterr().err


def test_an_output_that_answers_another_input_is_refused_before_ray(no_ray, tmp_path, capsys):
    source = written(tmp_path / "in.jsonl", openai_text("a", "b"))
    out = tmp_path / "out.jsonl"
    out.write_text(answered(2, "z"))  # another input's line 2
    assert main([source, "--output", str(out), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {out} answers line 2 as 'z'" in err and "'b'" in err


def test_an_attach_to_an_application_that_is_not_running_is_one_line_and_exit_code_2(
    monkeypatch, tmp_path, capsys
):
    import batch.cli
    from batch.model_tier import AttachError

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: None)

    def run(job, prepared, on_progress=None):
        raise AttachError(f"no Serve application {job.attach!r} is running on this Ray cluster")

    monkeypatch.setattr(batch.cli, "run", run)
    source = written(tmp_path / "in.jsonl", openai_text("a"))
    code = main([source, "--output", str(tmp_path / "out.jsonl"), "--attach", "gone", "--no-progress"])
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "mai-batch: --attach: no Serve application 'gone' is running on this Ray cluster"
    )


def replied(line: int, custom_id: str, status: int) -> str:
    """An OpenAI output line of a request the server answered with ``status``."""
    response = {"status_code": status, "request_id": f"r{line}", "body": {}}
    return (
        json.dumps({"id": f"batch_req_{line}", "custom_id": custom_id, "response": response, "error": None})
        + "\n"
    )


@pytest.mark.parametrize(
    ("flags", "todo", "kept"),
    [
        (["--retry-errors"], "2 rows to answer (openai, 3 done before, 2 errors asked again)", [1, 4, 5]),
        (
            ["--retry-errors", "--retry-client-errors"],
            "3 rows to answer (openai, 2 done before, 3 errors asked again)",
            [1, 5],
        ),
    ],
)
def test_retry_errors_takes_the_failed_rows_lines_out_and_answers_them_again(
    no_ray, tmp_path, capsys, flags, todo, kept
):
    source = written(tmp_path / "in.jsonl", openai_text("a", "b", "c", "d", "e"))
    out = tmp_path / "out.jsonl"
    lines = [replied(1, "a", 200), replied(2, "b", 503), replied(3, "c", 504), replied(4, "d", 400)]
    out.write_text("".join(lines) + answered(5, "e"))  # line 5 was no request: never asked again
    with pytest.raises(RayStarted):
        main([source, "--output", str(out), "--no-progress", *flags])
    assert without_job(capsys.readouterr().err) == f"mai-batch: {todo} -> {out}\n"
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [
        f"batch_req_{n}" for n in kept
    ]
    assert not (tmp_path / "out.jsonl.retry").exists()


@pytest.mark.parametrize("flags", [[], ["--retry-errors"], ["--retry-errors", "--retry-client-errors"]])
@pytest.mark.parametrize(
    "bad", ["\n", "   \n", "[1, 2]\n", "null\n"], ids=["blank", "spaces", "a-list", "null"]
)
def test_an_output_line_that_is_no_row_stops_a_rerun_before_ray_naming_it(
    no_ray, tmp_path, capsys, flags, bad
):
    source = written(tmp_path / "in.jsonl", openai_text("a", "b", "c"))
    out = tmp_path / "out.jsonl"
    data = (replied(1, "a", 200) + replied(2, "b", 503) + bad).encode()
    out.write_bytes(data)
    assert main([source, "--output", str(out), "--no-progress", *flags]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"mai-batch: --output {out} is no mai-batch output: line 3 of "
    )
    assert "nothing was changed" in err
    assert out.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == [
        "in.jsonl",
        "out.jsonl",
    ]


def test_retry_client_errors_alone_does_not_apply(no_ray, tmp_path, capsys):
    source = written(tmp_path / "in.jsonl", openai_text("a"))
    assert main([source, "--output", str(tmp_path / "o.jsonl"), "--retry-client-errors"]) == EXIT_USAGE
    assert "goes with --retry-errors" in capsys.readouterr().err


# --- shards and an output at a URI -------------------------------------------------------------------


def test_a_folder_of_shards_is_one_input_numbered_across_its_shards(no_ray, tmp_path, capsys):
    shards = tmp_path / "shards"
    shards.mkdir()
    written(shards / "part-1.jsonl", openai_text("a") + "\n")  # lines 1 and 2 (blank)
    written(shards / "part-2.jsonl", openai_text("b", "c"))  # lines 3 and 4 of the job
    written(shards / "notes.txt", "not a shard\n")
    out = tmp_path / "out.jsonl"
    out.write_text(answered(3, "b"))  # the second shard's first line, answered before
    with pytest.raises(RayStarted):
        main([str(shards), "--output", str(out), "--no-progress"])
    assert (
        without_job(capsys.readouterr().err)
        == f"mai-batch: 2 rows to answer (openai, 1 done before) -> {out}\n"
    )
    with pytest.raises(RayStarted):
        main([f"file://{shards}/part-*.jsonl", "--output", str(out), "--no-progress"])
    assert "2 rows to answer (openai, 1 done before)" in capsys.readouterr().err


def test_an_id_repeated_in_another_shard_is_a_duplicate_naming_its_first_line(tmp_path, cpu_config):
    from batch.inputs import InputFormat, scan_lines
    from batch.source import numbered_lines

    shards = tmp_path / "shards"
    shards.mkdir()
    written(shards / "a.jsonl", openai_text("x", "y"))
    written(shards / "b.jsonl", openai_text("y"))
    scan = scan_lines(numbered_lines(str(shards)), InputFormat.OPENAI, {}, cpu_config.limits)
    assert scan.rows == 3 and scan.duplicates == {3: 2}


def test_an_unreadable_shard_or_an_empty_glob_is_one_line_before_ray(no_ray, tmp_path, capsys, monkeypatch):
    assert main([f"{tmp_path}/*.jsonl", "--output", str(tmp_path / "out.jsonl")]) == EXIT_USAGE
    assert "matches no file" in capsys.readouterr().err
    shards = tmp_path / "shards"
    shards.mkdir()
    written(shards / "a.jsonl", openai_text("x"))
    written(shards / "b.jsonl", openai_text("y"))
    from batch.shards import Shards

    real_open = Shards.open

    def failing_open(self, path):  # a shard the filesystem refuses (a lost permission, an expired token)
        if path.endswith("b.jsonl"):
            return real_open(self, str(shards / "gone.jsonl"))
        return real_open(self, path)

    monkeypatch.setattr(Shards, "open", failing_open)
    assert main([f"{shards}/*.jsonl", "--output", str(tmp_path / "out.jsonl")]) == EXIT_USAGE
    assert "cannot read the input shard" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_an_output_at_a_uri_resumes_from_the_uris_copy(no_ray, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MAI_BATCH_STAGING", str(tmp_path / "staging"))
    source = written(tmp_path / "in.jsonl", openai_text("a", "b"))
    remote = tmp_path / "bucket" / "out.jsonl"
    remote.parent.mkdir()
    remote.write_text(answered(1, "a") + answered(2, "b"))
    assert main([source, "--output", f"file://{remote}"]) == 0
    assert capsys.readouterr().out == f"mai-batch: every one of the 2 rows is in file://{remote} already\n"
    staged = list((tmp_path / "staging").rglob("out.jsonl"))
    assert len(staged) == 1 and staged[0].read_text() == remote.read_text()


def test_the_cache_option_names_the_store_rows_read_and_fill(cpu_config, capsys):
    from batch.cli import with_cache

    assert with_cache(cpu_config, None) == cpu_config
    assert with_cache(cpu_config, "off").cache.enabled is False
    # A Redis that does not answer: said once, and the rows run without it.
    from harness.local_server import free_port

    config = with_cache(cpu_config, f"redis://:pw@127.0.0.1:{free_port()}/0")
    assert config.cache.url is not None and config.cache.enabled
    err = capsys.readouterr().err
    assert "does not answer" in err and "pw" not in err.replace("redis://***@", "")
