"""Requests routed and turned into jobs as the ingress does it (``routing.destination``, then the job
builders), synchronously, for the tests of the HTTP edge's pure parts."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_app.config import AppConfig
from serve_app.edge.images import ImageFetcher
from serve_app.edge.jobs import Job, answer_request, job_from_answer, job_from_chat, request_id_of
from serve_app.edge.routing import Passthrough, destination


async def no_download(url: str, param: str) -> str:
    raise AssertionError(f"no image download expected ({url} for {param})")


def chat_job(
    config: AppConfig, payload: Any, request_id: str | None = None, fetch: ImageFetcher = no_download
) -> Job | Passthrough:
    routed = destination(payload, config)
    if isinstance(routed, Passthrough):
        return routed
    return asyncio.run(job_from_chat(config, routed, request_id_of(request_id), fetch))


def answer_job(
    config: AppConfig, payload: Any, request_id: str | None = None, fetch: ImageFetcher = no_download
) -> Job:
    return asyncio.run(job_from_answer(config, answer_request(payload), request_id_of(request_id), fetch))
