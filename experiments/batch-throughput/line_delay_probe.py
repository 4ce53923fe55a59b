"""A line's delay with and without a follower: 1,000-row mai-batch jobs on the CPU stack, alternating
plain runs with runs whose output the bench's follower polls (loadtest/bench/stream_runs.follow),
the followed job started in a session of its own (as the bench did) or in a process group of the
probe's session. Each job's summary.json holds its line delays (``line_delay_s``); the figures go to
``<result file>`` beside this script.

    python experiments/batch-throughput/line_delay_probe.py [work folder] [result file]

(line-delay-polls.json came from an earlier version that compared the follower's poll interval,
0.05 s against 0.5 s, all in sessions of their own.)
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.jsonl import read_jsonl, write_jsonl  # noqa: E402
from harness.local_server import config_args, deploy, local_ray  # noqa: E402
from loadtest.bench.stream_runs import follow  # noqa: E402

# (name, seconds between the follower's polls or None: not followed, the job in a session of its own)
RUNS = (
    ("warm", None, False),
    ("plain", None, False),
    ("followed-session", 0.05, True),
    ("followed-group", 0.05, False),
    ("plain2", None, False),
    ("followed2-session", 0.05, True),
    ("followed2-group", 0.05, False),
)

COMMAND = "python experiments/batch-throughput/line_delay_probe.py"
RESULT = Path(__file__).with_name(sys.argv[2] if len(sys.argv) > 2 else "line-delay-sessions.json")
runs: list[dict] = []
records = read_jsonl(ROOT / "bench/data/easy-vqa-test-1016.jsonl")
work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/line-delay-probe")
work.mkdir(exist_ok=True)
write_jsonl(records[:1000], work / "rows.jsonl")
write_jsonl(records[1000:], work / "warm.jsonl")
with local_ray():
    import ray

    deploy(config_args("mai-cpu.yaml"), name="mai")
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    for name, poll_s, new_session in RUNS:
        out = work / f"out-{name}"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        data = work / ("warm.jsonl" if name == "warm" else "rows.jsonl")
        command = [str(ROOT / ".venv/bin/mai-batch"), str(data), "--output", str(out)]
        command += ["--config", str(ROOT / "configs/mai-cpu.yaml"), "--attach", "mai", "--policy", "mai"]
        command += ["--no-progress"]
        started = time.monotonic()
        if poll_s is not None:
            output = out / "predictions" / "mai.jsonl"
            code = follow(
                command, cwd=ROOT, env=env, output=output, poll_s=poll_s, new_session=new_session
            ).returncode
        else:
            code = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True).returncode
        summary = json.loads((out / "summary.json").read_text())
        print(name, code, round(time.monotonic() - started, 1), summary["line_delay_s"], flush=True)
        if name != "warm":
            keys = ("rows", "wall_s", "rows_per_s", "first_line_s", "line_delay_s")
            runs.append(
                {
                    "run": name,
                    "poll_s": poll_s,
                    "new_session": new_session,
                    **{key: summary.get(key) for key in keys},
                }
            )
RESULT.write_text(
    json.dumps({"command": COMMAND, "config": "configs/mai-cpu.yaml", "runs": runs}, indent=2) + "\n"
)
