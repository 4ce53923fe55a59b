"""mai-batch on a Ray cluster of two nodes (``ray.cluster_utils.Cluster``: two raylets on this machine,
each a node of its own to the scheduler), joined the way ``RAY_ADDRESS`` joins one: the rows are
answered on both nodes, every one once."""

import json

import pytest
import ray
from ray import serve
from ray.cluster_utils import Cluster

from batch.runner import BatchJob, prepare, run
from batch.settings import BatchSettings
from serve_app.config import AppConfig

from .test_batch import CONFIG, openai_line, read_lines, scripted_apps


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    serve.shutdown()
    ray.shutdown()
    cluster.shutdown()


def test_rows_are_answered_on_both_nodes_of_a_cluster(two_nodes, tmp_path):
    nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert len(nodes) == 2
    rows = 40
    source = tmp_path / "requests.jsonl"
    source.write_text(
        "\n".join(openai_line(f"q{i}", f"[slow] Is there a shape {i}?") for i in range(rows)) + "\n"
    )
    config = AppConfig.model_validate(CONFIG)
    job = BatchJob(
        input=str(source),
        output=tmp_path / "out.jsonl",
        config=config,
        settings=BatchSettings(actors=2, rows_in_flight=8),
    )
    summary = run(job, prepare(job), apps=scripted_apps(config))

    lines = read_lines(tmp_path / "out.jsonl")
    assert sorted(line["custom_id"] for line in lines) == sorted(f"q{i}" for i in range(rows))
    assert all(line["response"]["status_code"] == 200 for line in lines)
    assert set(summary["rows_per_node"]) == nodes  # both nodes answered rows
    assert all(count > 0 for count in summary["rows_per_node"].values())
    assert json.loads((tmp_path / "out.jsonl.summary.json").read_text())["rows"] == rows
