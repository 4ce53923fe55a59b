"""The emulated VLM's model of an engine, as pure functions: what it answers, how many tokens, how long.

Calibrated on the MAI paper's H100 profile (deployments/paper_profile.py); used by EmulatedVLM."""

from __future__ import annotations

import hashlib
import math
import random
import re
import uuid

from . import paper_profile
from .affinity import ModelCall
from .settings import EmulationSettings

PROMPT_KINDS = ("simple", "explain", "reasoning", "stage2", "transfer")
PASSTHROUGH = "passthrough"  # a request sent to the model itself: an open answer, Explain-long


def call_script(call: ModelCall | None, request_id: str | None = None) -> tuple[str, str, str]:
    """(request key, prompt kind, answer kind) of a call: a cascade call's from its ``ModelCall``; a
    call without one (or of a prompt kind the script does not know) is a passthrough (a request for
    the model itself), keyed by its ``request_id``."""
    if call is not None and call.prompt_kind in PROMPT_KINDS:
        return call.request_id, call.prompt_kind, call.answer_kind
    return request_id or uuid.uuid4().hex, PASSTHROUGH, "text"


def _unit(*parts: object) -> float:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def route_of(request: str, dataset: str, seed: int) -> str:
    """The route the scripted answers of one request lead the cascade to (Table 10's shares)."""
    agree_short, agree_reasoned, _ = paper_profile.ROUTE_SHARES[dataset]
    u = _unit("route", seed, request)
    if u < agree_short:
        return "agree_short"
    if u < agree_short + agree_reasoned:
        return "agree_reasoned"
    return "transfer"


# Per answer kind, two valid answers that differ: what agreeing and disagreeing models say.
_ANSWERS = {"yes_no": ("yes", "no"), "number": ("1", "2"), "choice": ("A", "B"), "text": ("A", "B")}


def scripted_answer(route: str, role: str, prompt_kind: str, answer_kind: str = "text") -> str:
    """What a model answers, valid for ``answer_kind``: the large model always gives the first
    answer; the small one agrees with it in stage 1 only on ``agree_short`` and after reasoning only
    on ``agree_reasoned``."""
    agreeing, disagreeing = _ANSWERS.get(answer_kind, _ANSWERS["text"])
    if role == "large":
        return agreeing
    if prompt_kind == "simple":
        return agreeing if route == "agree_short" else disagreeing
    return disagreeing if route == "transfer" else agreeing


def completion_tokens(
    settings: EmulationSettings, request: str, prompt_kind: str, max_tokens: int | None
) -> int:
    """Drawn from a log-normal around Table 5's mean (coefficient of variation ``token_spread``)."""
    simple, explain, reasoning = paper_profile.COMPLETION_TOKENS[settings.dataset][settings.profile]
    mean = {"explain": explain, PASSTHROUGH: explain, "reasoning": reasoning}.get(prompt_kind, simple)
    sigma = math.sqrt(math.log1p(settings.token_spread**2))
    rng = random.Random(f"{settings.seed}|{request}|{prompt_kind}|{settings.profile}")
    draw = rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma) if sigma > 0 else mean
    tokens = max(1, round(draw))
    return min(tokens, max_tokens) if max_tokens else tokens


def estimate_prompt_tokens(messages: list[dict], image_tokens: int) -> int:
    """About 1.3 tokens a word, plus ``image_tokens`` per image."""
    words, images = 0, 0
    for message in messages:
        content = message.get("content")
        for part in [content] if isinstance(content, str) else content or []:
            if isinstance(part, str):
                words += len(part.split())
            elif isinstance(part, dict) and part.get("type") == "image_url":
                images += 1
            elif isinstance(part, dict):
                words += len(str(part.get("text", "")).split())
    return max(1, round(words * 1.3)) + images * image_tokens


def reply_text(answer: str, prompt_kind: str, tokens: int) -> str:
    """The text of a reply of about ``tokens`` tokens ending in [[answer]] (bare for S2)."""
    return "".join(reply_pieces(answer, prompt_kind, tokens))


def reply_pieces(answer: str, prompt_kind: str, tokens: int) -> tuple[str, str, str]:
    """The reply as (what comes before the answer, the answer, what follows it)."""
    if prompt_kind == "stage2":
        return "", answer, ""
    filler = max(0, round((tokens - 3) / 1.3))
    return (" ".join(["step"] * filler) + "\n" if filler else "") + "[[", answer, "]]"


def constrained_pieces(
    pieces: tuple[str, str, str], regex: str, answer_kind: str
) -> tuple[str, str, str] | None:
    """``pieces`` as a reply that matches ``regex`` (a request's structured outputs, as the cascade
    asks them: ``[[answer]]``, after free text for a reasoning): the answer bracketed, a short reply
    without filler, and, when the scripted answer is not one the form admits, the first of the kind's
    scripted answers that is. None when no scripted reply matches (the engine refuses the grammar)."""
    before, answer, _ = pieces
    candidates = [answer, *_ANSWERS.get(answer_kind, ())]
    for free in (before.removesuffix("[["), ""):
        for candidate in candidates:
            shaped = (free + "[[", candidate, "]]")
            if re.fullmatch(regex, "".join(shaped)):
                return shaped
    return None


def scripted_confidence(
    settings: EmulationSettings, request: str, role: str, prompt_kind: str, route: str
) -> float:
    """The probability the reply gives its answer: mostly high (0.75 to 1), lower by about
    ``confidence_separation`` for the Simple answers of a stage-1 agreement scripted as wrong."""
    rng = random.Random(f"{settings.seed}|{request}|{role}|{prompt_kind}|confidence")
    confidence = 1 - 0.25 * rng.random() ** 2
    wrong = route == "agree_short" and _unit("wrong", settings.seed, request) < settings.wrong_agreement_share
    if wrong and prompt_kind == "simple":
        confidence -= settings.confidence_separation * (0.5 + rng.random())
    return min(1.0, max(0.01, confidence))


def reply_logprobs(pieces: tuple[str, str, str], confidence: float) -> list[dict]:
    """OpenAI ``logprobs.content`` spelling the reply: the answer's token carries ``confidence``."""
    before, answer, after = pieces
    tokens = [(before, 0.0), (answer, math.log(confidence)), (after, 0.0)]
    return [
        {"token": text, "logprob": logprob, "bytes": None, "top_logprobs": []}
        for text, logprob in tokens
        if text
    ]


def open_answer_words(tokens: int) -> list[str]:
    """The text of a passthrough reply of ``tokens`` tokens, one word a token."""
    return ["word" if i % 8 else "Sentence" for i in range(tokens)]


def per_token_s(settings: EmulationSettings, batch: int) -> float:
    return (1 / paper_profile.DECODE_TOKENS_PER_S[settings.profile]) * (
        1 + settings.batch_slowdown * max(0, batch - 1)
    )
