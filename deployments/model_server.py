"""ModelServer: ray.serve.llm's LLMServer with the cascade's plain-value call (``plain_chat``).

The deployments' ``LLMConfig`` names it as ``server_cls`` (``deployments/vlm.py``); everything else
(engine, placement, health, ``chat`` for passthroughs) is LLMServer's, unchanged.
"""

from __future__ import annotations

from ray.serve.llm.deployment import LLMServer

from .plain_chat import PlainChat


class ModelServer(PlainChat, LLMServer):
    pass
