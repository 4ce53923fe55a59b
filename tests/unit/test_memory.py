"""What the GPU configs need of a card's memory (deployments/memory.py): weights counted from the
checkpoint, the KV budget, activations and CUDA graphs, a CUDA context per process, per card against
what CUDA reports; every shipped GPU config fits the card it names, and what cannot fit is refused
naming the numbers."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from deployments.architecture import VENDORED, qwen3_vl_parameters, read_architecture
from deployments.memory import GiB, card_problems, scorer_need, usable_bytes
from serve_app.config import check_application, load_app_config
from serve_app.engine_config.inventory import manifest_groups, one_host
from serve_app.engine_config.memory import memory_check, memory_lines
from serve_app.engine_config.placement import engine_asks, placement_problems

ROOT = Path(__file__).resolve().parents[2]
SCORER_RUN = ROOT / "experiments" / "scorer-h200" / "scorer_gpu.json"
# Each shipped GPU config and the card its comments size it for.
GPU_CONFIGS = {
    "mai.yaml": "H100",
    "mai-2gpu.yaml": "H100",
    "mai-1gpu.yaml": "H100",
    "mai-1gpu-h200.yaml": "H200",
}
SINGLE_GPU = ("mai-1gpu.yaml", "mai-1gpu-h200.yaml")


def text(name: str) -> str:
    return (ROOT / "configs" / name).read_text()


def args(name: str, uncomment_scorer: bool = False) -> dict:
    """A shipped config's args; ``uncomment_scorer``: with its commented transfer_selection block on."""
    source = text(name)
    if uncomment_scorer:
        block = re.search(r"^( +)# (transfer_selection:\n(?:\1#   .*\n?)+)", source, re.M)
        assert block, f"{name} has no commented transfer_selection block"
        source = source.replace(block.group(0), block.group(0).replace(f"{block.group(1)}# ", block.group(1)))
    return yaml.safe_load(source)["applications"][0]["args"]


def check(config_args: dict, kind: str) -> dict:
    result = memory_check(load_app_config(config_args), kind)
    assert result is not None
    return result


def test_parameters_are_the_released_models_text_and_vision_tower():
    # Equal to transformers' own Qwen3VLForConditionalGeneration built from the same files
    # (tests/integration/test_gpu_memory.py); the configs' comments say 2.13 B and 8.77 B.
    small, large = (read_architecture(VENDORED[f"Qwen/Qwen3-VL-{size}-Instruct"]) for size in ("2B", "8B"))
    assert (small.parameters, large.parameters) == (2_127_532_032, 8_767_123_696)
    assert (small.kv_bytes_per_token(2), large.kv_bytes_per_token(2)) == (112 * 1024, 144 * 1024)


@pytest.mark.parametrize("folder", ["demo-small", "demo-large"])
def test_a_local_checkpoint_is_counted_from_its_safetensors_headers_as_the_formula_counts(folder):
    path = ROOT / "models" / folder
    arch = read_architecture(path)
    assert arch.parameters == qwen3_vl_parameters(json.loads((path / "config.json").read_text()))
    assert arch.stored_bytes == (path / "model.safetensors").stat().st_size - _header_bytes(path)


def _header_bytes(path: Path) -> int:
    with (path / "model.safetensors").open("rb") as handle:
        return 8 + int.from_bytes(handle.read(8), "little")


def test_the_cards_usable_memory_is_what_cuda_reports():
    measured = json.loads(SCORER_RUN.read_text())["steps"]["env"]["gpu"]["total_gib"]
    assert usable_bytes("H200") / GiB == pytest.approx(measured, abs=0.001)
    assert round(usable_bytes("H100") / GiB, 2) == 79.05  # NVML's 79.65 less the H200's measured gap


def test_the_scorer_estimate_covers_its_measured_peaks_on_an_h200():
    """The prefill's estimate (doubled, deployments/memory.py) against the H200 run: at every length
    and size it is above the peak over the resident weights, and the weights within 2 % of the
    allocated ones."""
    run = json.loads(SCORER_RUN.read_text())["steps"]["cost"]
    for name, model in run["models"].items():
        arch = read_architecture(ROOT / "configs" / "checkpoints" / name)
        image = model["image_tokens"]
        for length in model["lengths"].values():
            reasoning = length["prompt_tokens"] - image - 512  # the estimate adds 512 for the rest
            need = scorer_need(arch, "bfloat16", reasoning, image * 32 * 32)
            assert need.activations / GiB > length["scorer"]["peak_over_resident_gib"], (name, length)
        assert need.weights / GiB == pytest.approx(model["weights_gib"], rel=0.02)


@pytest.mark.parametrize(("name", "kind"), GPU_CONFIGS.items())
def test_every_shipped_gpu_config_fits_the_card_it_is_written_for(name, kind):
    result = check(args(name), kind)
    assert result["problems"] == [] and {card["gpu"] for card in result["cards"]} == {kind}
    for card in result["cards"]:
        assert 0 < card["free_bytes"] < card["usable_bytes"]


@pytest.mark.parametrize("name", SINGLE_GPU)
def test_the_commented_scorer_fits_beside_the_engines_and_is_counted(name):
    kind = GPU_CONFIGS[name]
    without, with_scorer = check(args(name), kind), check(args(name, uncomment_scorer=True), kind)
    [card] = with_scorer["cards"]
    assert [process["name"] for process in card["processes"]][-1] == "scorer"
    assert with_scorer["problems"] == []
    added = card["needed_bytes"] - without["cards"][0]["needed_bytes"]
    assert round(added / GiB, 1) == 6.0  # weights 4.0 + its largest prefill 1.0 + a CUDA context 1.0
    config = load_app_config(args(name, uncomment_scorer=True))
    assert config.transfer_selection.available() == ("full", "budget", "attention")
    assert config.cascade.transfer_selector == "full"  # a request asks for attention; none gets it unasked
    assert placement_problems(engine_asks(config), one_host(1, kind)) == []


def test_each_config_states_the_figures_the_check_computes():
    for name in SINGLE_GPU:
        result, comment = check(args(name), GPU_CONFIGS[name]), text(name)
        [card] = result["cards"]
        assert f"Together {card['needed_bytes'] / GiB:.1f} GiB" in comment
        assert f"{card['free_bytes'] / GiB:.1f} GiB left" in comment
        for process in card["processes"]:
            assert f"{process['footprint'] / GiB:.1f} GiB of the card" in comment, process["name"]
            assert f"{process['kv_tokens']:,} tokens" in comment


def test_one_gpu_pair_on_an_l4_is_refused_naming_the_numbers():
    [card] = check(args("mai-1gpu.yaml"), "L4")["cards"]
    problems = " ".join(card["problems"])
    assert "one L4 (21.9 GiB as CUDA reports it)" in problems
    assert "weights 16.3 GiB + KV 24.0 GiB + activations and CUDA graphs 3.1 GiB = 43.4 GiB" in problems
    assert "small qwen3-vl-2b 17.2 GiB + large qwen3-vl-8b 44.4 GiB = 61.6 GiB" in problems


def test_the_h200_budgets_are_refused_on_an_80_gb_card():
    config = load_app_config(args("mai-1gpu-h200.yaml"))
    [problem] = placement_problems(engine_asks(config), one_host(1, "H100"))
    assert "fit no GPU of the inventory" in problem  # accelerator_type H200: never placed on an H100
    unpinned = args("mai-1gpu-h200.yaml")
    for role in ("small", "large"):
        unpinned[role].pop("accelerator_type")
    problems = check(unpinned, "H100")["problems"]
    assert any(
        "weights 16.3 GiB + KV 68.0 GiB" in problem and "0.65 (51.4 GiB)" in problem for problem in problems
    )


def test_a_budget_the_share_held_nominally_but_the_weights_do_not_fit_is_refused():
    """The old rule compared the KV budget alone with the share of NVML's memory: 40 GiB < 0.62 x 79.65
    GiB passed, and the engine, not held to its share, took the small engine's memory."""
    oversized = args("mai-1gpu.yaml")
    oversized["large"]["engine_kwargs"]["kv_cache_memory_bytes"] = 40 * GiB
    problem, *others = check(oversized, "H100")["problems"]
    assert "weights 16.3 GiB + KV 40.0 GiB + activations and CUDA graphs 3.1 GiB = 59.4 GiB" in problem
    assert "0.62 (49.0 GiB)" in problem and "lower kv_cache_memory_bytes to 29.5 GiB" in problem
    # ... and the small engine, starting after it, would not find its share free.
    assert others == [
        "small qwen3-vl-2b on one H100 (79.0 GiB as CUDA reports it): at start it needs its "
        "gpu_memory_utilization 0.25 (19.8 GiB) free, but beside the others (large qwen3-vl-8b 60.4 GiB) "
        "and its own CUDA context (1.0 GiB) 17.6 GiB is left when it starts last: lower the shares"
    ]
    # Pinned to a card, the config's own validation refuses it before anything starts.
    oversized["large"]["accelerator_type"] = "H100"
    with pytest.raises(ValueError, match="59.4 GiB exceed its gpu_memory_utilization 0.62"):
        load_app_config(oversized)


def test_shares_that_leave_no_room_for_the_other_engine_when_it_starts_last_are_refused():
    crowded = args("mai-1gpu-h200.yaml", uncomment_scorer=True)
    crowded["large"]["engine_kwargs"]["gpu_memory_utilization"] = 0.75
    with pytest.raises(ValueError, match=r"large qwen3-vl-8b on one H200 .* 0.75 \(104.9 GiB\) free.* 101.7"):
        load_app_config(crowded)


def test_the_8b_on_an_l4_keeps_no_whole_context_of_kv_cache():
    problems = check(args("mai.yaml"), "L4")["problems"]
    [problem] = problems
    assert problem.startswith("large qwen3-vl-8b on one L4")
    assert "leaves 0.3 GiB of KV cache, under one whole context (2.2 GiB)" in problem


def test_mai_yaml_fits_the_inventories_its_comment_names():
    header = text("mai.yaml").split("proxy_location", 1)[0]
    comment = " ".join(line.lstrip("#").strip() for line in header.splitlines())
    config = load_app_config(args("mai.yaml"))
    [gpus] = {
        int(n) for n in re.findall(r"mai-check-config configs/mai\.yaml --gpus (\d+)`\s+places", comment)
    }
    assert placement_problems(engine_asks(config), one_host(gpus, "H100")) == []
    assert gpus == sum(ask.replicas for ask in engine_asks(config))
    refused = re.search(r"`mai-check-config configs/mai\.yaml --gpus (\d+)` refuses", comment)
    assert refused and placement_problems(engine_asks(config), one_host(int(refused[1]), "H100"))
    manifest = yaml.safe_load((ROOT / "k8s" / "rayservice.yaml").read_text())
    served = check_application(yaml.safe_load(manifest["spec"]["serveConfigV2"])["applications"][0])
    assert placement_problems(engine_asks(served), manifest_groups(manifest)) == []
    # Unpinned on the same groups, a large replica lands on an L4 and is refused there.
    assert any(
        "on one L4" in problem
        for problem in placement_problems(engine_asks(config), manifest_groups(manifest))
    )


def test_the_scorer_beside_a_whole_gpu_small_model_needs_the_engine_to_leave_it_a_fraction():
    """docs/gpu-serving.md, "Sparse transfer on a GPU": configs/mai.yaml's small engine on 0.95 of its GPU
    with a fixed budget, the scorer on the 0.05 left, per card."""
    for kind, kv, share in (("H100", 56, 0.85), ("L4", 8, 0.66)):
        variant = args("mai.yaml")
        small = variant["small"]
        small["bundle"] = {"GPU": 0.95}
        small["engine_kwargs"] |= {"kv_cache_memory_bytes": kv * GiB, "gpu_memory_utilization": share}
        variant["transfer_selection"] = {"attention": True, "scorer": {"device": "gpu", "num_gpus": 0.05}}
        config = load_app_config(variant)
        asks = engine_asks(config)
        assert [ask.name for ask in asks] == ["small qwen3-vl-2b", "large qwen3-vl-8b", "scorer"]
        small_cards = [card for card in memory_check(config, kind)["cards"] if "scorer" in str(card)]
        [card] = small_cards
        assert [p["name"] for p in card["processes"]] == ["small qwen3-vl-2b", "scorer"]
        assert card["problems"] == [], (kind, card["problems"])
        beside = [replace(ask, replicas=1) for ask in asks if ask.name != "large qwen3-vl-8b"]
        assert placement_problems(beside, one_host(1, kind)) == []  # Ray packs the 0.05 beside the 0.95
    small["engine_kwargs"]["kv_cache_memory_bytes"] = 12 * GiB  # on the L4: no room for the scorer
    assert memory_check(load_app_config(variant), "L4")["problems"]


@pytest.mark.parametrize("name", ["mai-cpu.yaml", "mai-cpu-mixed.yaml", "mai-emulated.yaml"])
def test_a_config_without_gpu_processes_has_no_memory_to_check(name):
    config = load_app_config(args(name))
    assert engine_asks(config) == [] and memory_check(config, "H100") is None


def test_the_report_names_each_process_and_the_card():
    lines = memory_lines("c.yaml", check(args("mai-1gpu-h200.yaml", uncomment_scorer=True), "H100"))
    assert lines[0] == "c.yaml memory on one H200 (139.8 GiB as CUDA reports it):"
    assert lines[1].startswith("  small qwen3-vl-2b: weights 4.0 GiB + KV 24.0 GiB (224,694 tokens)")
    assert lines[3] == (
        "  scorer: weights 4.0 GiB + activations and CUDA graphs 1.0 GiB + CUDA context 1.0 GiB = 6.0 GiB"
    )
    assert lines[4] == "  together 125.6 GiB, 14.2 GiB left"


def test_rules_on_synthetic_needs_name_every_number():
    from deployments.memory import Need

    alone = Need("e", weights=4 * GiB, kv=4 * GiB, activations=2 * GiB, share=0.99)
    [problem] = card_problems("L4", [alone])  # 0.99 of the card is never free beside its own context
    assert problem == (
        "e on one L4 (21.9 GiB as CUDA reports it): at start it needs its gpu_memory_utilization 0.99 "
        "(21.7 GiB) free, but beside its own CUDA context (1.0 GiB) 20.9 GiB is left when it starts last: "
        "lower the shares"
    )
    profiled = Need("p", weights=4 * GiB, kv=None, activations=2 * GiB, share=0.9, min_kv=20 * GiB)
    [problem] = card_problems("L4", [profiled])
    assert (
        "0.9 (19.7 GiB) less weights 4.0 GiB and activations and CUDA graphs 2.0 GiB leaves 13.7 GiB"
        in problem
    )
    assert "under one whole context (20.0 GiB)" in problem
