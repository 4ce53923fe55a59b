"""The sampling defaults a checkpoint brings to vLLM: what the engine would apply to every request under
``generation_config="auto"`` (vLLM's default), read by vLLM itself.

Under ``"auto"`` vLLM takes the sampling fields of the checkpoint's ``generation_config.json`` as the
server's defaults, and a request field left unset falls to them (``ChatCompletionRequest``: the
request's value, else the server's default, else OpenAI's). The released Qwen3-VL Instruct checkpoints
declare temperature 0.7, top_k 20, top_p 0.8 and repetition_penalty 1.0; the demo models declare
none. With ``generation_config: "vllm"`` the engines ignore them and the server decides; this module
names what that setting sets aside, with vLLM's own ``ModelConfig.get_diff_sampling_param``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def generation_defaults(checkpoint: str | Path) -> dict[str, Any]:
    """The sampling parameters vLLM would take from the checkpoint folder ``checkpoint`` (its
    ``config.json``, and ``generation_config.json`` when there is one) under
    ``generation_config="auto"``: e.g. ``{"temperature": 0.7, "top_k": 20, "top_p": 0.8, ...}``, in vLLM's
    names (``max_new_tokens`` is ``max_tokens``); empty when the checkpoint declares none."""
    from vllm.config import ModelConfig

    folder = Path(checkpoint)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: not a checkpoint folder")
    model = ModelConfig(model=str(folder), generation_config="auto", skip_tokenizer_init=True)
    return model.get_diff_sampling_param()
