"""mai-batch over Ray Data and Serve, with scripted model deployments.

A real local Ray (2 CPUs), Ray Data's actor pool, Serve's deployments and handles, the real MAIIngress
request path and cascade in the actors; only the engines are scripted (tests/integration/scripted_llm.py),
so that every route and failure can be reached on purpose."""

import json
import os
import signal

import pytest
import ray
from ray import serve

from batch.inputs import RecordSettings
from batch.runner import BatchJob, prepare, run
from batch.settings import BatchSettings
from serve_app.config import AppConfig
from serve_app.fleet.stats_holder import StatsHolderDeployment

from ..images import data_url
from .scripted_llm import ScriptedLLMServer

CONFIG = {
    "small": {"model_id": "fake-small", "source": "scripted"},
    "large": {"model_id": "fake-large", "source": "scripted"},
    "limits": {"max_image_pixels": 1_000_000},
}


@pytest.fixture(scope="module")
def local_ray():
    # Serve's throughput mode, as the bench and a tuned deployment run it: a handle's router runs on the
    # caller's event loop, so the actors must make their handles on the loop their rows run on. (The
    # two-node test, test_batch_cluster.py, runs in the default mode.)
    os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    serve.shutdown()
    ray.shutdown()
    del os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"]


def scripted_apps(config: AppConfig) -> dict:
    return {
        "small": ScriptedLLMServer.options(name="small:fake").bind("small"),
        "large": ScriptedLLMServer.options(name="large:fake").bind("large"),
        "stats": StatsHolderDeployment.bind(config.cascade.audit, config.cascade.adaptive),
    }


def openai_line(custom_id, question, model="mai", **body):
    message = {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": data_url()}},
            {"type": "text", "text": question},
        ],
    }
    return json.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [message], **body},
        }
    )


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_openai_batch_file_is_answered_row_by_row_with_its_errors(local_ray, tmp_path):
    lines = [
        openai_line("agree", "[agree] Is there a red shape?"),
        openai_line("reasoned", "[reasoned] Is the shape red?"),
        "{not json",
        openai_line("agree", "[agree] Is it round?"),  # a duplicate custom_id
        openai_line("unknown-model", "Is it round?", model="gpt-9"),
        json.dumps({"custom_id": "embed", "method": "POST", "url": "/v1/embeddings", "body": {}}),
        openai_line("transfer", "[transfer] Is the shape blue?"),
    ]
    source = tmp_path / "requests.jsonl"
    source.write_text("\n".join(lines) + "\n")
    config = AppConfig.model_validate(CONFIG)
    job = BatchJob(
        input=str(source), output=tmp_path / "out.jsonl", config=config, settings=BatchSettings(actors=2)
    )
    summary = run(job, prepare(job), apps=scripted_apps(config))

    rows = {row["id"]: row for row in read_lines(tmp_path / "out.jsonl")}
    assert len(rows) == len(read_lines(tmp_path / "out.jsonl")) == 7  # every line once
    ok = rows["batch_req_1"]["response"]
    assert ok["status_code"] == 200 and ok["body"]["object"] == "chat.completion"
    assert ok["body"]["mai"]["route"] == "agree_short" and rows["batch_req_1"]["custom_id"] == "agree"
    assert rows["batch_req_2"]["response"]["body"]["mai"]["route"] == "agree_reasoned"
    assert rows["batch_req_7"]["response"]["body"]["mai"]["route"] == "transfer"
    assert (
        rows["batch_req_3"]["response"] is None
        and "not valid JSON" in rows["batch_req_3"]["error"]["message"]
    )
    assert (
        rows["batch_req_4"]["error"]["code"] == "duplicate_id"
        and "line 1" in rows["batch_req_4"]["error"]["message"]
    )
    unknown = rows["batch_req_5"]["response"]
    assert unknown["status_code"] in (400, 404) and "gpt-9" in unknown["body"]["error"]["message"]
    assert "/v1/embeddings" in rows["batch_req_6"]["error"]["message"]
    assert summary["rows"] == 7 and summary["answered"] == 3 and summary["errors"] == 4
    assert summary["routes"] == {"agree_short": 1, "agree_reasoned": 1, "transfer": 1}
    assert summary["tokens"]["small"]["completion_tokens"] > 0

    # The same command again: nothing left to do, nothing written twice.
    assert prepare(job).todo == 0


def test_each_line_is_written_as_its_row_finishes_not_with_its_batch(local_ray, tmp_path):
    # One batch of 8 rows (8 in flight): seven answer at once, one waits 3 s on the large model.
    lines = [openai_line(f"q{i}", f"[agree] Is there a shape {i}?") for i in range(7)]
    lines.insert(3, openai_line("late", "[largeslow] Is there a late shape?"))
    source, output = tmp_path / "requests.jsonl", tmp_path / "out.jsonl"
    source.write_text("\n".join(lines) + "\n")
    config = AppConfig.model_validate(CONFIG)
    job = BatchJob(input=str(source), output=output, config=config, settings=BatchSettings(rows_in_flight=8))
    seen: list[tuple[int, list[str]]] = []  # at each progress step: rows counted, the file's custom ids

    def look(rows: int, tally) -> None:
        seen.append((tally.rows, [row["custom_id"] for row in read_lines(output)]))

    summary = run(job, prepare(job), apps=scripted_apps(config), on_progress=look)

    first_count, first_ids = seen[0]
    assert 1 <= first_count < 8 and len(first_ids) == first_count and "late" not in first_ids
    assert seen[-1][1][-1] == "late" and len(seen[-1][1]) == 8  # the slow row's line came last
    assert summary["first_line_s"] < summary["wall_s"] - 2  # the first line long before the slow one
    assert summary["line_delay_s"]["max"] < 1.0  # each line within a second of its answer
    assert summary["rows_repeated"] == 0


def test_records_go_to_a_folder_mai_eval_report_scores_and_a_rerun_resumes(local_ray, tmp_path):
    from evaluation.records import write_records

    records = [
        {
            "id": f"r{i}",
            "image": data_url(),
            "question": f"[agree] Is there a shape {i}?",
            "answer": "yes",
            "metric": "exact",
        }
        for i in range(5)
    ]
    dataset = tmp_path / "data.jsonl"
    write_records(records, dataset)
    config = AppConfig.model_validate(CONFIG)
    out = tmp_path / "out"
    job = BatchJob(input=str(dataset), output=out, config=config, records=RecordSettings(policy="mai"))
    predictions = out / "predictions" / "mai.jsonl"
    # As if an earlier run died after two rows, the second cut short.
    prepare(job)
    predictions.write_text(
        json.dumps({"id": "r0", "policy": "mai", "status": 200, "latency_s": 0.1, "answer": "Yes", "line": 1})
        + "\n"
        + '{"id": "r1", "pol'
    )
    prepared = prepare(job)
    assert prepared.todo == 4
    summary = run(job, prepared, apps=scripted_apps(config))
    rows = read_lines(predictions)
    assert sorted(row["id"] for row in rows) == ["r0", "r1", "r2", "r3", "r4"]
    assert all(row["status"] == 200 for row in rows) and rows[1]["score"] == 1.0
    assert summary["rows"] == 4 and summary["skipped_as_done"] == 1
    segments = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert segments[0]["requests"] == 4 and segments[0]["policy"] == "mai"
    # mai-eval report scores the folder as a mai-eval run's.
    from evaluation.passes import report_folder

    assert report_folder(out, command="mai-eval report") == 0
    report = json.loads((out / "results.json").read_text())
    assert report["policies"]["mai"]["answered"] == 5


def _kill_actor(class_prefix: str) -> str:
    """SIGKILL the process of one live actor whose class name starts with ``class_prefix``: a crash, as
    a node or an OOM kill would cause it. Returns the class name."""
    from ray._private import state

    [actor, *_] = [
        a
        for a in state.actors().values()
        if a["ActorClassName"].startswith(class_prefix) and a["State"] == "ALIVE" and a.get("Pid")
    ]
    os.kill(actor["Pid"], signal.SIGKILL)
    return actor["ActorClassName"]


@pytest.mark.parametrize(
    "victim",
    [
        "ServeReplica:mai-batch-small",  # a model replica: Serve starts another; rows wait, then retry
        "MapWorker(MapBatches(RowAnswerer))",  # a batch actor: Ray Data restarts it and retries its rows
    ],
)
def test_a_process_killed_mid_job_loses_no_row_and_degrades_none(local_ray, tmp_path, victim):
    rows = 24
    source = tmp_path / "requests.jsonl"
    source.write_text(
        "\n".join(openai_line(f"q{i}", f"[slow] Is there a shape {i}?") for i in range(rows)) + "\n"
    )
    config = AppConfig.model_validate(CONFIG)
    job = BatchJob(
        input=str(source),
        output=tmp_path / "out.jsonl",
        config=config,
        settings=BatchSettings(rows_in_flight=4),
    )
    killed = []

    def kill_once(done: int, tally) -> None:
        if not killed:
            killed.append(_kill_actor(victim))

    summary = run(job, prepare(job), apps=scripted_apps(config), on_progress=kill_once)
    assert killed
    lines = read_lines(tmp_path / "out.jsonl")
    assert sorted(line["custom_id"] for line in lines) == sorted(f"q{i}" for i in range(rows))
    assert all(line["response"]["status_code"] == 200 for line in lines)
    assert summary["routes"] == {"agree_short": rows}  # not one degraded answer
    if victim.startswith("ServeReplica"):  # the rows in flight on it were asked again
        assert summary["retried"] >= 1


def test_rows_count_against_the_key_the_job_names(local_ray, tmp_path):
    from serve_app.edge.access import KeyLedgerDeployment

    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - name: team-batch\n    sha256: {'ab' * 32}\n    models: [mai]\n")
    config = AppConfig.model_validate(CONFIG | {"security": {"keys_file": str(keys)}})
    source = tmp_path / "requests.jsonl"
    lines = [
        openai_line("one", "[agree] Is there a red shape?"),
        openai_line("two", "[transfer] Is the shape blue?"),
        openai_line("other-model", "[agree] Is it round?", model="mai-large"),
    ]
    source.write_text("\n".join(lines) + "\n")
    job = BatchJob(
        input=str(source),
        output=tmp_path / "out.jsonl",
        config=config,
        settings=BatchSettings(key_name="team-batch"),
    )
    apps = scripted_apps(config) | {"ledger": KeyLedgerDeployment.bind()}
    summary = run(job, prepare(job), apps=apps)
    rows = {row["custom_id"]: row for row in read_lines(tmp_path / "out.jsonl")}
    assert rows["other-model"]["response"]["status_code"] == 403  # the key may use mai only
    usage = summary["key_usage"]
    # Three requests: the 403 row was let in before its model was read, as a request's body is.
    assert usage["key"] == "team-batch" and usage["requests"] == 3
    assert usage["escalations"] == 1 and usage["early_exits"] == 1 and sum(usage["tokens"].values()) > 0


def test_a_folder_of_shards_is_read_in_parallel_and_numbered_across_its_shards(local_ray, tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "part-1.jsonl").write_text(openai_line("a", "[agree] Is it red?") + "\n\n")  # lines 1, 2
    (shards / "part-2.jsonl").write_text(
        openai_line("b", "[agree] Is it round?") + "\n" + openai_line("a", "[agree] Is it blue?") + "\n"
    )  # lines 3 and 4; line 4 repeats line 1's custom_id
    config = AppConfig.model_validate(CONFIG)
    job = BatchJob(
        input=f"file://{shards}",
        output=tmp_path / "out.jsonl",
        config=config,
        settings=BatchSettings(actors=2),
    )
    prepared = prepare(job)
    assert prepared.offsets == {str(shards / "part-1.jsonl"): 0, str(shards / "part-2.jsonl"): 2}
    summary = run(job, prepared, apps=scripted_apps(config))
    rows = {row["id"]: row for row in read_lines(tmp_path / "out.jsonl")}
    assert sorted(rows) == ["batch_req_1", "batch_req_3", "batch_req_4"] and summary["rows"] == 3
    assert rows["batch_req_3"]["custom_id"] == "b" and rows["batch_req_3"]["response"]["status_code"] == 200
    assert (
        rows["batch_req_4"]["error"]["code"] == "duplicate_id"
        and "line 1" in rows["batch_req_4"]["error"]["message"]
    )
    assert prepare(job).todo == 0
