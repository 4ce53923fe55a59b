"""The memory check of every GPU config on each card, by the rule of the project's code at hand.

For each config (and the variants the docs describe: the attention scorer uncommented, an oversized KV
budget) on one host of H100, H200 and L4 GPUs with the GPUs its comments name (8 for configs/mai.yaml,
2 for configs/mai-2gpu.yaml, 1 for the single-GPU configs): whether the placement check
(serve_app/engine_config/placement.py, which holds the memory check) passes, what it says, and, where
the code has it, what each card holds
(serve_app/engine_config/memory.py). With ``--code DIR`` the project's modules are imported from DIR
first: a tree of an earlier commit (``git archive <commit> | tar -x -C DIR``) gives that commit's rule,
on the configs of this checkout. No GPU, no Ray, no vLLM: the configs' validation and the checks.

    python experiments/second-gpu-day/memory/memory_check.py --out <file>
    python experiments/second-gpu-day/memory/memory_check.py --code <tree> --out <file>
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CARDS = ("H100", "H200", "L4")
GPUS_NAMED = {"mai.yaml": 8, "mai-2gpu.yaml": 2, "mai-1gpu.yaml": 1, "mai-1gpu-h200.yaml": 1}
GiB = 1 << 30


def config_args(name: str, uncomment_scorer: bool = False) -> dict[str, Any]:
    import yaml

    text = (ROOT / "configs" / name).read_text()
    if uncomment_scorer:
        block = re.search(r"^( +)# (transfer_selection:\n(?:\1#   .*\n?)+)", text, re.M)
        assert block, name
        text = text.replace(block.group(0), block.group(0).replace(f"{block.group(1)}# ", block.group(1)))
    return yaml.safe_load(text)["applications"][0]["args"]


def variants() -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (the shipped config it comes from, its args)."""
    found = {name: (name, config_args(name)) for name in GPUS_NAMED}
    for name in ("mai-1gpu.yaml", "mai-1gpu-h200.yaml"):
        found[f"{name} + scorer"] = (name, config_args(name, uncomment_scorer=True))
    oversized = copy.deepcopy(config_args("mai-1gpu.yaml"))
    oversized["large"]["engine_kwargs"]["kv_cache_memory_bytes"] = 40 * GiB
    found["mai-1gpu.yaml, large KV 40 GiB"] = ("mai-1gpu.yaml", oversized)
    beside = copy.deepcopy(config_args("mai.yaml"))
    beside["small"]["bundle"] = {"GPU": 0.95}
    beside["small"]["engine_kwargs"] |= {"kv_cache_memory_bytes": 56 * GiB, "gpu_memory_utilization": 0.85}
    beside["transfer_selection"] = {"attention": True, "scorer": {"device": "gpu", "num_gpus": 0.05}}
    found["mai.yaml + scorer (small on 0.95, KV 56 GiB, share 0.85)"] = ("mai.yaml", beside)
    return found


def check(args: dict[str, Any], card: str, gpus: int) -> dict[str, Any]:
    from serve_app.config import load_app_config
    from serve_app.engine_config.inventory import one_host
    from serve_app.engine_config.placement import engine_asks, placement_problems

    try:
        config = load_app_config(args)
    except ValueError as refused:
        return {"verdict": "refused at validation", "problems": [" ".join(str(refused).split())]}
    inventory = one_host(gpus, card)
    try:
        from serve_app.engine_config.memory import memory_check
    except ImportError:  # the earlier rule: the KV budget against the share of NVML's memory
        from deployments.gpus import GPU_MEMORY

        problems = placement_problems(engine_asks(config), inventory, GPU_MEMORY)
        return {"verdict": "refused" if problems else "passes", "problems": problems}
    problems = placement_problems(engine_asks(config), inventory)
    memory = memory_check(config, card, inventory)
    cards = [
        {
            "gpu": held["gpu"],
            "needed_gib": round(held["needed_bytes"] / GiB, 2),
            "usable_gib": round(held["usable_bytes"] / GiB, 2),
            "free_gib": round(held["free_bytes"] / GiB, 2),
            "processes": {
                process["name"]: None
                if process["footprint"] is None
                else round(process["footprint"] / GiB, 2)
                for process in held["processes"]
            },
        }
        for held in (memory or {}).get("cards", [])
    ]
    return {"verdict": "refused" if problems else "passes", "problems": problems, "cards": cards}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, help="import the project's modules from this tree first")
    parser.add_argument("--out", type=Path, required=True, help="the JSON result")
    args = parser.parse_args()
    if args.code is not None:
        sys.path.insert(0, str(args.code.resolve()))
    else:
        sys.path.insert(0, str(ROOT))
    import serve_app

    rows = []
    for name, (shipped, config) in variants().items():
        for card in CARDS:
            result = check(config, card, GPUS_NAMED[shipped])
            rows.append({"config": name, "gpu": card, "gpus": GPUS_NAMED[shipped], **result})
            print(f"{name} on {GPUS_NAMED[shipped]} x {card}: {result['verdict']}", flush=True)
    command = ["python", "experiments/second-gpu-day/memory/memory_check.py"]
    command += ["--code", "<earlier-tree>"] if args.code is not None else []
    command += ["--out", str(args.out)]
    meta = {
        "command": " ".join(command),
        "commit": git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
        "code": str(Path(serve_app.__file__).resolve().parents[1]),
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
