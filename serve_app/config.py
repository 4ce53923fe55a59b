"""The application's arguments (the ``args:`` of a Serve config file), validated.

Unknown keys are errors that name the key; every default is written here, not in code elsewhere.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from deployments.settings import Autoscaling, ModelDeployment, Strict

from .cascade import CascadeOptions


class IngressDeployment(Strict):
    autoscaling: Autoscaling = Autoscaling(min_replicas=1, max_replicas=2, target_ongoing_requests=32)
    max_ongoing_requests: int = Field(256, ge=1)
    max_queued_requests: int = Field(1024, ge=1)
    num_cpus: float = Field(0.0, ge=0)


class Limits(Strict):
    """What a request may carry. Beyond these the request gets a 4xx and no model is called."""

    max_images: int = Field(1, ge=1)
    max_image_bytes: int = Field(10 * 1024 * 1024, ge=1)
    max_image_pixels: int = Field(4096 * 4096, ge=1)
    max_question_chars: int = Field(8000, ge=1)
    max_answer_tokens: int = Field(256, ge=1, description="upper bound of a request's max_tokens")
    allow_remote_images: bool = False


class AppConfig(Strict):
    small: ModelDeployment
    large: ModelDeployment
    cascade: CascadeOptions = CascadeOptions()
    ingress: IngressDeployment = IngressDeployment()
    limits: Limits = Limits()
    request_timeout_s: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _distinct_models(self) -> AppConfig:
        if self.small.model_id == self.large.model_id:
            raise ValueError("small and large need different model_id values")
        return self


def load_app_config(args: dict[str, Any]) -> AppConfig:
    """Validate ``args``; a ``ValueError`` names every offending key."""
    return AppConfig.model_validate(args)
