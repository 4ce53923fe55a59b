"""ModelServer: ray.serve.llm's LLMServer with the cascade's plain-value call (``plain_chat``).

The deployments' ``LLMConfig`` names it as ``server_cls`` (``deployments/vlm.py``); everything else
(engine, placement, health, ``chat`` for passthroughs) is LLMServer's, unchanged, but for one check at
the start of a GPU model's replica: the NVIDIA driver (``deployments/driver.py``), before
ray.serve.llm's engine start downloads the weights (``VLLMEngine.start``: its node initialisation)
and initialises CUDA.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ray.serve.llm.deployment import LLMServer

from .driver import require_driver, visible_driver
from .plain_chat import PlainChat

logger = logging.getLogger("ray.serve")


def check_replica_driver(llm_config: Any, probe: Callable[[], str | None] = visible_driver) -> None:
    """A GPU model's replica refuses to start on a driver the stack cannot run (DriverTooOld, naming
    the driver found and the one needed); a CPU model's checks nothing."""
    accelerator = getattr(llm_config, "accelerator_config", None)
    if getattr(accelerator, "kind", None) != "gpu":
        return
    model = llm_config.model_id
    try:
        found = require_driver(probe)
    except Exception as exc:
        logger.error("%s: %s", model, exc)
        raise
    if found is None:
        logger.warning("%s: no NVIDIA driver visible to the replica; the driver was not checked", model)
    else:
        logger.info("%s: NVIDIA driver %s", model, found)


class ModelServer(PlainChat, LLMServer):
    async def start(self) -> None:
        """The driver check, then LLMServer's start (the engine: weights downloaded, CUDA, warm-up)."""
        check_replica_driver(self._llm_config)
        await super().start()
