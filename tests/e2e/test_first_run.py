"""The first_run bench scenario against the session's real CPU stack: every model and prompt streamed
through the passthrough, timed, its tokens counted, and its table rendered."""

from loadtest.bench.scenario import Bench
from loadtest.bench.scenarios import first_run
from serve_app.core.roles import ROLES

from .stack import BASE


def test_first_run_times_every_model_and_prompt_on_the_cpu_stack(server):
    # 256 tokens: the demo models decode hundreds a second, so fewer would last no longer than the
    # spread of the time to first token that their decoding time is measured from.
    parameters = first_run.Parameters(sizes=(256,), repetitions=1, decode_tokens=256)
    result = first_run.run(Bench(BASE, config="mai-cpu.yaml", served=True), parameters)

    expected = {
        role: [
            kind.value for kind in first_run.prompt_kinds(parameters.stages) if first_run.sends(role, kind)
        ]
        for role in ROLES
    }
    assert {role: list(model["stages"]) for role, model in result["models"].items()} == expected
    assert result["reasoning_tokens"] > 0
    for role, model in result["models"].items():
        for stage, row in model["stages"].items():
            cell = row["sizes"]["256"]
            where = f"{role} {stage}: {cell}"
            assert cell["ttft_ms"]["median"] > 0 and cell["decode_tokens_per_s"] is not None, where
            assert cell["decode_tokens_per_s"]["median"] > 0, where
            assert cell["first_chunk_ms"]["median"] > 0, where
            assert cell["prompt_tokens"]["median"] > cell["image_tokens"] > 0, where
            assert cell["completion_tokens"]["median"] == parameters.decode_tokens, where
            # The processor's rule agrees with the engine: the image adds its tokens and its markers.
            assert cell["image_tokens_from"] == "processor", where
            assert 0 < cell["image_tokens_measured"] - cell["image_tokens"] <= 4, where
            assert cell["paper"]["ttft_ms"] > 0 and cell["paper"]["decode_tokens_per_s"] > 0, where

    lines = first_run.table(result)
    rows = [line for line in lines if line.startswith(("| small `demo-small`", "| large `demo-large`"))]
    assert len(rows) == sum(len(stages) for stages in expected.values())
    assert all(" 256² " in row and "×" in row for row in rows)
