"""The benchmarks of the real Serve application, as scenarios of one runner.

    python -m loadtest.bench --list                  # the scenarios, their configs, files, parameters
    python -m loadtest.bench                         # all of them (make bench); hours on 2 cores
    python -m loadtest.bench --only replica_starts --param session=/tmp/ray/session_latest
    python -m loadtest.bench --only real,prefix_cache  # some of them
    python -m loadtest.bench --only autoscaling --param repetitions=3
    python -m loadtest.bench --render                # only re-render bench/RESULTS.md
    python -m loadtest.bench --only first_run --config configs/mai.yaml [--url http://127.0.0.1:8000]

One runner (`runner.py`) runs the scenarios that need no Ray first (`stats_scale`, `replica_starts`),
then sets the environment and starts a local Ray once, and per scenario deploys through the config
schema as `serve run` does, runs it, writes its result through the one writer with the flat
provenance record (`harness/results.py`, `harness/provenance.py`) and re-renders bench/RESULTS.md
(`render.py`, with the sections of files other commands write: `external.py`, `evaluations.py`). A
scenario that reads what another run left (`replica_starts`: a Ray session's logs) runs only when
named. A scenario that takes a config (`first_run`) serves another one with
`--config`, or measures a server already serving it with `--url` (no local Ray). A scenario
(`scenarios/<name>.py`) is its parameters as data, its run and its table. What scenarios share:
request bodies and load (`load.py`), the rotated interleaving (`schedule.py`), medians with their
spread (`summary.py`), and the libraries of families of scenarios (`real_stack.py`, `plans.py`,
`audits.py`, `surges.py`, `analytic.py`).

Figures from the emulated engines are a capacity model (latency, never accuracy); everything in one
scenario runs side by side on one local Ray, and its figures are ratios of runs made together.
"""
