"""A config's engines at their maximum replicas against a declared node inventory: what can never be
placed is named with its numbers."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from deployments.memory import Need
from serve_app.config import load_app_config
from serve_app.engine_config.inventory import gpu_kind, manifest_groups, one_host
from serve_app.engine_config.placement import Ask, NodeGroup, engine_asks, placement_problems

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def config(name: str):
    return load_app_config(yaml.safe_load((ROOT / "configs" / name).read_text())["applications"][0]["args"])


def test_mai_yaml_at_four_replicas_each_needs_eight_gpus():
    asks = engine_asks(config("mai.yaml"))
    [problem] = placement_problems(asks, one_host(2, "H100"))
    assert (
        "ask for 8 GPUs" in problem and "3 small qwen3-vl-2b" in problem and "3 large qwen3-vl-8b" in problem
    )
    assert "1 node(s) x 2 H100" in problem
    assert placement_problems(asks, one_host(8, "H100")) == []


def test_the_one_gpu_config_fits_one_gpu_and_not_none():
    asks = engine_asks(config("mai-1gpu.yaml"))
    assert [ask.gpu_share for ask in asks] == [0.49, 0.49]
    assert placement_problems(asks, one_host(1, "H100")) == []
    [problem] = placement_problems(asks, one_host(0, "H100"))
    assert "1 small qwen3-vl-2b, 1 large qwen3-vl-8b" in problem


def test_fractions_share_a_gpu_only_while_their_memory_shares_fit_it():
    asks = [Ask("a", 1, 0.4, 0.6), Ask("b", 1, 0.4, 0.6)]
    [problem] = placement_problems(asks, one_host(1, None))
    assert "1 b replica(s) fit no GPU" in problem
    assert placement_problems(asks, one_host(2, None)) == []
    assert placement_problems([Ask("a", 1, 0.4, 0.4), Ask("b", 1, 0.4, 0.6)], one_host(1, None)) == []


def test_a_whole_gpu_never_shares_and_a_pin_needs_a_node_advertising_it():
    assert placement_problems([Ask("f", 1, 0.5, 0.3), Ask("w", 1, 1.0, 0.9)], one_host(1, None))
    pinned = [Ask("small", 2, 1.0, 0.9, {"mai_small": 1})]
    assert placement_problems(pinned, one_host(4, None))  # no node advertises mai_small
    groups = [NodeGroup("small-gpu", nodes=2, gpus=1, resources={"mai_small": 1})]
    assert placement_problems(pinned, groups) == []
    one = [NodeGroup("small-gpu", nodes=1, gpus=2, resources={"mai_small": 1})]  # one pin for two replicas
    assert placement_problems(pinned, one)


def test_what_each_gpu_holds_is_checked_against_its_memory_and_only_where_its_kind_is_known():
    need = Need("large", weights=16 * GiB, kv=24 * GiB, activations=3 * GiB, share=0.25)
    ask = Ask("large", 1, 0.49, 0.25, need=need)
    [problem] = placement_problems([ask], one_host(1, "H100"))
    assert "large on one H100 (79.0 GiB as CUDA reports it)" in problem
    assert "= 43.0 GiB exceed its gpu_memory_utilization 0.25 (19.8 GiB)" in problem
    wider = replace(ask, memory_share=0.6, need=replace(need, share=0.6))
    assert placement_problems([wider], one_host(1, "H100")) == []
    assert placement_problems([ask], one_host(1, None)) == []  # an unknown kind: nothing to check


def test_an_accelerator_type_places_a_replica_only_on_its_kind():
    ask = Ask("large", 1, 1.0, 0.9, accelerator_type="H200")
    assert placement_problems([ask], one_host(1, "H100"))
    assert placement_problems([ask], one_host(1, "H200")) == []
    assert placement_problems([ask], one_host(1, None)) == []  # a node of unknown kind may be one


def test_the_rayservice_groups_hold_its_own_serve_config_at_max_replicas():
    manifest = yaml.safe_load((ROOT / "k8s" / "rayservice.yaml").read_text())
    groups = {group.name: group for group in manifest_groups(manifest)}
    assert groups["head"].gpus == 0
    assert (groups["small-gpu"].gpu, groups["small-gpu"].resources) == ("L4", {"mai_small": 1})
    assert (groups["large-gpu"].gpu, groups["large-gpu"].resources) == ("H100", {"mai_large": 1})
    serve = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    served = load_app_config(serve["applications"][0]["args"])
    assert placement_problems(engine_asks(served), groups.values()) == []
    fewer = [
        NodeGroup(g.name, 1, g.gpus, g.gpu, g.resources) if g.name == "large-gpu" else g
        for g in groups.values()
    ]
    [problem] = placement_problems(engine_asks(served), fewer)
    assert "3 large qwen3-vl-8b replica(s)" in problem


@pytest.mark.parametrize(
    ("label", "kind"),
    [
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-T4", None),
        (None, None),
    ],
)
def test_gpu_kinds_are_read_off_node_labels(label, kind):
    assert gpu_kind(label) == kind
