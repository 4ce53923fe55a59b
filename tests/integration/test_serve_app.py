"""The Serve application over HTTP, with scripted LLMServer-compatible model deployments.

A real local Ray (2 CPUs), real Serve proxy, the real MAIIngress and client; only the engines are
scripted, so that every route, policy and failure can be reached on purpose."""

import json
import time

import httpx
import pytest
import ray
from ray import serve

from harness.local_server import deployment_handle, free_port
from serve_app.app import build_ingress, model_tier
from serve_app.config import AppConfig

from ..images import chat_body, data_url, png_bomb
from .scripted_llm import SLOW_S, ScriptedLLMServer

CONFIG = {
    "small": {"model_id": "fake-small", "source": "scripted"},
    "large": {"model_id": "fake-large", "source": "scripted"},
    "cascade": {"timeouts": {"short_s": 5, "reasoning_s": 5, "stage2_s": 5, "transfer_s": 5}},
    "ingress": {"autoscaling": {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 8}},
    "limits": {"max_image_pixels": 1_000_000},
    # The cascade's runs are what these tests check (their engine calls, routes, metrics and audits, for
    # questions asked again from test to test): no answer reused.
    "cache": {"enabled": False},
}


def run_app(config: AppConfig, name: str, route_prefix: str) -> dict:
    """The ingress of ``config`` over two scripted engines as the app ``name``; the engines' handles."""
    small = ScriptedLLMServer.options(name="small:fake").bind("small")
    large = ScriptedLLMServer.options(name="large:fake").bind("large")
    serve.run(build_ingress(config, model_tier(config, small, large)), name=name, route_prefix=route_prefix)
    return {role: deployment_handle(f"{role}:fake", name=name) for role in ("small", "large")}


@pytest.fixture(scope="module")
def server():
    port = free_port()
    metrics_port = free_port(port)
    # Metrics every second (Ray's default is 10 s), exported for Prometheus on metrics_port.
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _metrics_export_port=metrics_port,
        _system_config={"metrics_report_interval_ms": 1000},
    )
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    config = AppConfig.model_validate(CONFIG)
    handles = run_app(config, "mai", "/")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        yield client, handles, f"http://127.0.0.1:{metrics_port}/metrics"
    serve.shutdown()
    ray.shutdown()


@pytest.fixture
def http(server):
    client, handles, _ = server
    for handle in handles.values():
        handle.reset.remote().result()
    return client


@pytest.fixture
def calls(server):
    _, handles, _ = server
    return lambda role: handles[role].calls.remote().result()


def post_chat(http, question, **kwargs):
    return http.post("/v1/chat/completions", json=chat_body(question, **kwargs))


# ---------------------------------------------------------------- routes of the cascade


@pytest.mark.parametrize(
    ("scenario", "route", "answer", "small_kinds", "large_kinds"),
    [
        ("agree", "agree_short", "Yes", ["simple"], ["simple"]),
        ("reasoned", "agree_reasoned", "Yes", ["simple", "reasoning"], ["simple"]),
        ("transfer", "transfer", "No", ["simple", "reasoning"], ["simple", "transfer"]),
    ],
)
def test_cascade_routes_over_http(http, calls, scenario, route, answer, small_kinds, large_kinds):
    response = post_chat(http, f"Is the shape red? [{scenario}]")
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["x-mai-route"] == route
    assert body["object"] == "chat.completion" and body["model"] == "mai"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": answer}
    trace = body["mai"]["trace"]
    assert trace["route"] == route and body["mai"]["route"] == route
    assert sorted(c["kind"] for c in calls("small")) == sorted(small_kinds)
    assert sorted(c["kind"] for c in calls("large")) == sorted(large_kinds)
    assert all(c["has_image"] for c in calls("small") + calls("large"))
    stage_prompt = sum(stage["prompt_tokens"] for stage in trace["stages"])
    stage_completion = sum(stage["completion_tokens"] for stage in trace["stages"])
    assert body["usage"] == {
        "prompt_tokens": stage_prompt,
        "completion_tokens": stage_completion,
        "total_tokens": stage_prompt + stage_completion,
        "prompt_tokens_details": {"cached_tokens": sum(stage["cached_tokens"] for stage in trace["stages"])},
    }
    assert all(stage["status"] == "ok" and stage["prompt_tokens"] > 0 for stage in trace["stages"])
    # The per-stage ledger carries what each engine call reported as served from its prefix cache.
    assert all(stage["cached_tokens"] == stage["prompt_tokens"] // 2 for stage in trace["stages"])
    assert trace["tokens"]["small"]["cached_tokens"] == sum(
        stage["cached_tokens"] for stage in trace["stages"] if stage["model"] == "small"
    )


@pytest.mark.parametrize(
    ("model", "small_kinds", "large_kinds", "route"),
    [
        ("mai-small", ["simple"], [], "single"),
        ("mai-large", [], ["simple"], "single"),
        ("mai-small-reason", ["reasoning", "stage2"], [], "single"),
        ("mai-large-reason", [], ["reasoning", "stage2"], "single"),
        ("mai-transfer", ["reasoning"], ["transfer"], "transfer"),
        ("mai-small-explain", ["explain"], [], "single"),
        ("mai-large-explain", [], ["explain"], "single"),
    ],
)
def test_every_policy_over_http(http, calls, model, small_kinds, large_kinds, route):
    response = post_chat(http, "Is the shape red?", model=model)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == model
    assert response.headers["x-mai-route"] == route
    assert [c["kind"] for c in calls("small")] == small_kinds
    assert [c["kind"] for c in calls("large")] == large_kinds


def test_stage_one_calls_run_in_parallel(http, calls):
    response = post_chat(http, "Is the shape red? [slow]")
    assert response.status_code == 200
    [small], [large] = calls("small"), calls("large")
    assert small["started"] < large["finished"] and large["started"] < small["finished"]
    assert response.json()["mai"]["trace"]["latency_s"] < 2 * SLOW_S


def test_native_answer_route_with_choices(http, calls):
    response = http.post(
        "/v1/mai/answer",
        json={
            "image": data_url(),
            "question": "Which shape is it? [choicetransfer]",
            "choices": ["circle", "square", "star"],
            "policy": "cascade",
            "options": {"stage2_answer": "inline"},
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "choice" and body["route"] == "transfer" and body["answer"] == "B"
    assert [stage["name"] for stage in body["trace"]["stages"]] == [
        "short_small",
        "short_large",
        "reason_small",
        "transfer_large",
    ]
    assert [c["kind"] for c in calls("large")] == ["simple", "transfer"]  # choice: the paper's reference form


def test_a_request_shaped_like_lmms_evals_openai_backend_is_answered(http, calls):
    """lmms-eval's openai_compatible model: text before the image, temperature and max_tokens set,
    MMBench's options followed by its instruction."""
    question = (
        "Which shape is it? [agree] Options:\nA. circle\nB. square\n\n"
        "Answer with the option's letter from the given choices directly."
    )
    response = http.post(
        "/v1/chat/completions",
        json={
            "model": "mai",
            "max_tokens": 32,
            "temperature": 0,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": question},
                        {"type": "image_url", "image_url": {"url": data_url()}},
                    ],
                }
            ],
        },
    )
    assert response.status_code == 200, response.text
    trace = response.json()["mai"]["trace"]
    assert trace["kind"] == "choice"
    short = [c["max_tokens"] for c in calls("small") + calls("large") if "-short_" in c["request_id"]]
    assert short == [32, 32]
    # The scripted models answer "Yes", which is no option: they agree on nothing, so the cascade goes on.
    assert trace["checks"][0]["valid"] == [False, False] and not trace["checks"][0]["accepted"]
    assert response.json()["mai"]["route"] != "agree_short"
    # No stage answered in kind, so the answer was asked for once more in its form: an option.
    assert trace["repair"]["answered"] and trace["answer_valid"]
    assert response.json()["choices"][0]["message"]["content"] in {"A", "B", "circle", "square"}
    repairs = [c for c in calls("small") + calls("large") if c["constraint"] is not None]
    assert len(repairs) == 1  # once, for the stage that would have answered


def test_max_tokens_reaches_the_engines(http, calls):
    assert post_chat(http, "Is the shape red? [agree]", max_tokens=3).status_code == 200
    assert [c["max_tokens"] for c in calls("small") + calls("large")] == [3, 3]


def test_streaming_returns_the_answer_as_sse(http):
    with http.stream(
        "POST",
        "/v1/chat/completions",
        json=chat_body("Is the shape red? [reasoned]", stream=True, stream_options={"include_usage": True}),
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-mai-route"] == "agree_reasoned"
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "Yes"
    assert (
        chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-2]["mai"]["route"] == "agree_reasoned"
    )
    assert chunks[-1]["usage"]["total_tokens"] > 0


def test_request_id_is_taken_from_the_client_and_stamped_on_engine_calls(http, calls):
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("Is the shape red? [reasoned]"),
        headers={"x-request-id": "client-42"},
    )
    assert response.status_code == 200
    assert (
        response.headers["x-request-id"] == "client-42"
        and response.json()["mai"]["request_id"] == "client-42"
    )
    assert response.json()["id"] == "chatcmpl-client-42"
    engine_ids = sorted(call["request_id"] for call in calls("small") + calls("large"))
    assert [engine_id.rsplit("-", 1)[0] for engine_id in engine_ids] == [
        "mai-client-42-reason_small-reasoning-yes_no",
        "mai-client-42-short_large-simple-yes_no",
        "mai-client-42-short_small-simple-yes_no",
    ]
    assert len(set(engine_ids)) == 3  # unique per engine call
    bad = http.post("/v1/chat/completions", json=chat_body(), headers={"x-request-id": "no spaces please"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request_id"
    assert len(calls("small")) + len(calls("large")) == 3  # the bad one reached no engine


def test_models_and_health(http):
    assert http.get("/healthz").json() == {"status": "ok"}
    ids = [model["id"] for model in http.get("/v1/models").json()["data"]]
    assert ids == [
        "mai",
        "mai-small",
        "mai-large",
        "mai-small-reason",
        "mai-large-reason",
        "mai-transfer",
        "mai-small-explain",
        "mai-large-explain",
        "fake-small",
        "fake-large",
    ]


# ---------------------------------------------------------------- failures


def test_small_model_crash_degrades_to_the_large_answer(http):
    response = post_chat(http, "Is the shape red? [smallfails]")
    assert response.status_code == 200
    trace = response.json()["mai"]["trace"]
    assert trace["route"] == "degraded_large_only"
    # The trace says the model failed and under which error id; what the engine said stays in the log.
    error = trace["stages"][0]["error"]
    assert trace["stages"][0]["status"] == "error" and "is unavailable (error id " in error
    assert "crashed" not in error


def test_large_model_error_is_a_503_with_retry_after(http):
    response = post_chat(http, "Is the shape red? [largefails]")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert error["code"] == "model_unavailable" and "large model failed" in error["message"]


def test_large_model_error_falls_back_to_small_when_asked(http):
    response = post_chat(
        http, "Is the shape red? [largefails]", mai={"options": {"on_large_failure": "small"}}
    )
    assert response.status_code == 200
    assert response.headers["x-mai-route"] == "degraded_small_only"


# ---------------------------------------------------------------- bad input: 4xx and no model call

BAD_REQUESTS = [
    ("malformed json", b"{'model': 'mai'", 400, "not valid JSON"),
    (
        "no user message",
        {"model": "mai-large", "messages": [{"role": "system", "content": "x"}]},
        400,
        "no user message",
    ),
    (
        "no image",
        {"model": "mai-large", "messages": [{"role": "user", "content": "Is it red?"}]},
        400,
        "no image",
    ),
    ("no question", chat_body(question=""), 400, "question is empty"),
    (
        "two images",
        {
            "model": "mai-large",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url()}},
                        {"type": "image_url", "image_url": {"url": data_url()}},
                        {"type": "text", "text": "Q?"},
                    ],
                }
            ],
        },
        400,
        "2 images",
    ),
    ("not base64", chat_body(image="data:image/png;base64,***"), 400, "not valid base64"),
    (
        "not an image",
        chat_body(image="data:image/png;base64,aGVsbG8gd29ybGQ="),
        400,
        "not a PNG, JPEG, WebP or GIF",
    ),
    ("too many pixels", chat_body(image=data_url(size=(1100, 1000))), 413, "over the limit"),
    ("decompression bomb", chat_body(image=png_bomb()), 413, "pixels"),
    ("remote url", chat_body(image="http://169.254.169.254/latest"), 400, "remote image URLs are disabled"),
    ("file url", chat_body(image="file:///etc/passwd"), 400, "file: URLs"),
    ("unknown model", chat_body(model="gpt-5"), 404, "unknown model"),
    ("max_tokens negative", chat_body(max_tokens=-1), 400, "max_tokens"),
    (
        "unknown selector",
        chat_body(mai={"options": {"transfer_selector": "magic"}}),
        400,
        "unknown transfer_selector",
    ),
]


@pytest.mark.parametrize(("name", "body", "status", "needle"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_input_is_a_4xx_and_no_model_is_called(http, calls, name, body, status, needle):
    if isinstance(body, bytes):
        response = http.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    else:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert needle in error["message"] and error["type"] and error["code"]
    assert calls("small") == [] and calls("large") == []


def test_unknown_path_is_a_json_404(http):
    response = http.get("/v1/nothing")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


# ---------------------------------------------------------------- metrics


def _sample(text: str, name: str, **tags: str) -> float:
    """The value of the sample of ``name`` whose labels include ``tags`` (summed over the rest)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{key}="{value}"' in line for key, value in tags.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


EXPECTED_SAMPLES = [
    ("ray_mai_requests_total", {"policy": "cascade", "route": "transfer"}),
    ("ray_mai_request_latency_s_count", {"policy": "cascade", "route": "agree_short"}),
    ("ray_mai_verifications_total", {"stage": "reasoned", "agreed": "false"}),
    ("ray_mai_verifications_total", {"stage": "short", "agreed": "true"}),
    ("ray_mai_degraded_answers_total", {"route": "degraded_small_only"}),
    ("ray_mai_request_errors_total", {"status": "404", "code": "model_not_found"}),
    ("ray_mai_tokens_total", {"model": "small", "prompt_kind": "reasoning", "direction": "completion"}),
    ("ray_mai_stage_latency_s_count", {"model": "large", "prompt_kind": "transfer", "status": "ok"}),
]


def _scrape(url: str) -> str:
    try:
        return httpx.get(url, timeout=5).text
    except httpx.HTTPError:
        return ""


def test_the_ingress_exports_its_metrics_to_prometheus(server, http):
    import time

    _, _, metrics_url = server
    before = _scrape(metrics_url)
    baseline = [_sample(before, name, **tags) for name, tags in EXPECTED_SAMPLES]
    assert post_chat(http, "Is the shape red? [transfer]").status_code == 200
    assert post_chat(http, "Is the shape red? [agree]").status_code == 200
    assert (
        post_chat(
            http, "Is the shape red? [largefails]", mai={"options": {"on_large_failure": "small"}}
        ).status_code
        == 200
    )
    assert http.post("/v1/chat/completions", json=chat_body(model="gpt-9")).status_code == 404
    deadline = time.monotonic() + 30
    while True:
        text = _scrape(metrics_url)
        grown = [
            _sample(text, name, **tags) > base
            for (name, tags), base in zip(EXPECTED_SAMPLES, baseline, strict=True)
        ]
        if all(grown) or time.monotonic() > deadline:
            break
        time.sleep(1)
    missing = [f"{name}{tags}" for (name, tags), ok in zip(EXPECTED_SAMPLES, grown, strict=True) if not ok]
    assert not missing, f"these samples did not grow within 30 s: {missing}"


# ---------------------------------------------------------------- API keys, body limit, CORS


@pytest.fixture(scope="module")
def image_host():
    """A local HTTP server with images for the remote-image tests; yields its port."""
    import http.server
    import threading

    from ..images import image_bytes

    files = {
        "/red.png": image_bytes(),
        "/notes.png": b"just some text",
        "/big.png": image_bytes(size=(64, 64)) + b"\0" * 60_000,
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="module")
def secure(server, tmp_path_factory):
    """A second app on /secure: keys from a mounted-secret-style file, a small body limit, CORS for one
    origin, remote images from an allowlisted host (a local one, so private addresses are allowed)."""
    client, _, _ = server
    keys = tmp_path_factory.mktemp("secret") / "api-keys"
    keys.write_text("# one key per line\nsk-mai-first\nsk-mai-second\n")
    config = AppConfig.model_validate(
        CONFIG
        | {
            "security": {"api_keys_file": str(keys), "cors_allow_origins": ["https://app.example.com"]},
            "limits": {
                "max_image_pixels": 1_000_000,
                "max_body_bytes": 50_000,
                "max_image_bytes": 40_000,
                "allow_remote_images": True,
                "remote_image_hosts": ["localhost"],
                "remote_image_allow_private_networks": True,
                "remote_image_timeout_s": 5,
            },
        }
    )
    run_app(config, "secure", "/secure")
    yield client
    serve.delete("secure")


def test_api_keys_are_required_and_checked(secure):
    body = chat_body("Is the shape red? [agree]")
    missing = secure.post("/secure/v1/chat/completions", json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "invalid_api_key"
    wrong = secure.post(
        "/secure/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-mai-third"}
    )
    assert wrong.status_code == 401 and "sk-mai" not in wrong.text
    assert secure.get("/secure/v1/models").status_code == 401
    for headers in ({"authorization": "Bearer sk-mai-second"}, {"x-api-key": "sk-mai-first"}):
        assert secure.post("/secure/v1/chat/completions", json=body, headers=headers).status_code == 200
    assert (
        secure.get("/secure/v1/models", headers={"authorization": "Bearer sk-mai-first"}).status_code == 200
    )
    assert secure.get("/secure/healthz").status_code == 200  # probes need no key
    assert secure.post("/v1/chat/completions", json=body).status_code == 200  # the other app is open


def test_a_body_over_the_limit_is_a_413_before_parsing(secure):
    big = chat_body("Is the shape red? [agree]", image=data_url(size=(400, 400), fmt="PNG")) | {
        "padding": "x" * 60_000
    }
    response = secure.post(
        "/secure/v1/chat/completions", json=big, headers={"authorization": "Bearer sk-mai-first"}
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("path", "host", "status", "code"),
    [
        ("/red.png", "localhost", 200, None),
        ("/notes.png", "localhost", 400, "invalid_image"),
        ("/big.png", "localhost", 413, "image_too_large"),
        ("/missing.png", "localhost", 400, "remote_image_failed"),
        ("/red.png", "127.0.0.1", 400, "remote_image_forbidden"),  # not on the allowlist
    ],
)
def test_remote_images_are_fetched_then_checked_like_inline_ones(
    secure, image_host, path, host, status, code
):
    url = f"http://{host}:{image_host}{path}"
    response = secure.post(
        "/secure/v1/chat/completions",
        json=chat_body("Is the shape red? [agree]", image=url),
        headers={"authorization": "Bearer sk-mai-first"},
    )
    assert response.status_code == status, response.text
    if code is not None:
        assert response.json()["error"]["code"] == code
    else:
        assert response.headers["x-mai-route"] == "agree_short"


def test_cors_is_off_by_default_and_on_for_configured_origins(secure):
    preflight = {
        "origin": "https://app.example.com",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type",
    }
    allowed = secure.options("/secure/v1/chat/completions", headers=preflight)
    assert allowed.headers.get("access-control-allow-origin") == "https://app.example.com"
    other = secure.options(
        "/secure/v1/chat/completions", headers=preflight | {"origin": "https://evil.example"}
    )
    assert other.headers.get("access-control-allow-origin") is None
    default_app = secure.post(
        "/v1/chat/completions",
        json=chat_body("Is the shape red? [agree]"),
        headers={"origin": "https://app.example.com"},
    )
    assert "access-control-allow-origin" not in default_app.headers


# ---------------------------------------------------------------- timeouts, end to end


@pytest.fixture(scope="module")
def hurried(server):
    """A third app on /hurried: stage timeouts of 1 s and a request timeout of 2 s (``allslow``'s three
    stages of 0.8 s each end within their stage's timeout, 0.2 s to spare, and together pass the
    request's)."""
    client, handles, _ = server
    config = AppConfig.model_validate(
        CONFIG
        | {
            "cascade": {"timeouts": {"short_s": 1.0, "reasoning_s": 1.0, "stage2_s": 1.0, "transfer_s": 1.0}},
            "request_timeout_s": 2.0,
        }
    )
    run_app(config, "hurried", "/hurried")
    yield client
    serve.delete("hurried")


@pytest.mark.parametrize(
    ("scenario", "status", "route", "answer", "timed_out"),
    [
        ("smallslow", 200, "degraded_large_only", "Yes", "short_small"),
        ("reasonslow", 200, "degraded_no_reasoning", "Yes", "reason_small"),
        ("transferslow", 200, "degraded_no_transfer", "Yes", "transfer_large"),
        ("largeslow", 503, None, None, None),
        ("allslow", 504, None, None, None),
    ],
)
def test_what_the_client_sees_when_a_stage_or_the_request_times_out(
    hurried, scenario, status, route, answer, timed_out
):
    response = hurried.post("/hurried/v1/chat/completions", json=chat_body(f"Is the shape red? [{scenario}]"))
    assert response.status_code == status, response.text
    if status == 200:
        body = response.json()
        assert response.headers["x-mai-route"] == route and body["choices"][0]["message"]["content"] == answer
        stages = {stage["name"]: stage["status"] for stage in body["mai"]["trace"]["stages"]}
        assert stages[timed_out] == "timeout"
        assert response.elapsed.total_seconds() < 2.5  # the slow call was not waited for
    elif status == 503:
        error = response.json()["error"]
        assert error["code"] == "model_unavailable" and "large" in error["message"]
        assert response.headers["retry-after"] == "5"
    else:
        error = response.json()["error"]
        assert error["code"] == "timeout" and "request timeout of 2 s" in error["message"]
        assert response.elapsed.total_seconds() < 3.0


def test_sampling_reaches_every_stage_and_logprobs_come_from_the_answers_completion(http, calls):
    body = chat_body(
        "[transfer] Is it red?", temperature=0.7, top_p=0.9, seed=5, logprobs=True, top_logprobs=1
    )
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    reply = response.json()
    stages = calls("small") + calls("large")
    assert len(stages) == 4 and all(call["decoding"] == (0.7, 0.9, 5, 1) for call in stages)
    assert reply["mai"]["route"] == "transfer"
    final = next(stage for stage in reply["mai"]["trace"]["stages"] if stage["name"] == "transfer_large")
    tokens = reply["choices"][0]["logprobs"]["content"]
    assert "".join(token["token"] for token in tokens) == final["output"]
    assert all(len(token["top_logprobs"]) == 1 and token["bytes"] for token in tokens)
    streamed = http.post("/v1/chat/completions", json=body | {"stream": True})
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert [
        c["choices"][0].get("logprobs")
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ] == [{"content": tokens}]
    plain = post_chat(http, "Is it red?").json()
    assert plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("scenario", ["largerefuses", "reasonrefuses"])
def test_an_input_a_model_refuses_is_a_400_with_its_reason_not_a_503(http, calls, scenario):
    started = time.monotonic()
    response = post_chat(http, f"[{scenario}] Is it red?")
    assert response.status_code == 400, response.text
    assert "retry-after" not in response.headers
    error = response.json()["error"]
    assert error["code"] == "invalid_image" and "aspect ratio must be smaller than 200" in error["message"]
    if scenario == "largerefuses":  # the small model's stage-1 call (3 s) is cancelled, not waited for
        assert time.monotonic() - started < 2.5
        # The cancel reaches the engine after the reply has left. It may also come before the call
        # reached the engine (while the model's replica read its body), and then nothing ran. Either
        # way, no stage-1 call of the small model runs its 3 s to the end.
        time.sleep(max(0.0, started + 3.3 - time.monotonic()))
        small = calls("small")
        assert all(call.get("cancelled") is True and call["finished"] is None for call in small), small


# ---------------------------------------------------------------- the models themselves (passthrough)


def conversation(*turns, system="Answer in French.", model="fake-large", **extra):
    messages = [{"role": "system", "content": system}] if system else []
    for role, content in turns:
        messages.append({"role": role, "content": content})
    return {"model": model, "messages": messages, **extra}


IMAGE_TURN = [
    {"type": "image_url", "image_url": {"url": data_url()}},
    {"type": "text", "text": "What is it?"},
]


def test_models_are_listed_beside_the_policies_and_answer_unchanged(http, calls):
    ids = [model["id"] for model in http.get("/v1/models").json()["data"]]
    assert ids[-2:] == ["fake-small", "fake-large"] and "mai" in ids
    body = conversation(
        ("user", IMAGE_TURN), ("assistant", "Un cercle."), ("user", "And its colour?"), n=2, temperature=0.7
    )
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-mai-route"] == "passthrough"
    reply = response.json()
    assert reply["model"] == "fake-large" and len(reply["choices"]) == 2 and "mai" not in reply
    assert reply["choices"][0]["message"]["content"] == "large answers 4 messages"
    [call] = calls("large")
    assert call["kind"] == "passthrough" and call["roles"] == ["system", "user", "assistant", "user"]
    assert (call["n"], call["temperature"], call["images"]) == (2, 0.7, 1) and calls("small") == []


def test_a_streamed_passthrough_arrives_in_chunks(http, calls):
    body = conversation(("user", "Tell me a story."), system=None, model="fake-small", stream=True)
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200 and response.headers["x-mai-route"] == "passthrough"
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) >= 4
    text = "".join(json.loads(event[6:])["choices"][0]["delta"]["content"] for event in events[:-1])
    assert text.strip() == "small answers 1 messages" and calls("small")[0]["stream"] is True


@pytest.mark.parametrize(
    ("name", "body", "status", "needle"),
    [
        ("engine refuses", conversation(("user", "Please [engine400]")), 400, "the engine refuses this"),
        ("bad sampling field", conversation(("user", "Hi"), temperature="hot"), 400, "temperature"),
        ("a field the engine does not know", conversation(("user", "Hi"), temprature=0.5), 400, "temprature"),
        (
            "no text in any message",
            conversation(("user", [{"type": "image_url", "image_url": {"url": data_url()}}]), system=None),
            400,
            "carry no text",
        ),
        (
            "fields vLLM refuses together",
            conversation(("user", "Hi"), stream_options={"include_usage": True}),
            400,
            "Stream options",
        ),
        (
            "private image in an earlier turn",
            conversation(
                ("user", [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/x"}}]),
                ("assistant", "ok"),
                ("user", IMAGE_TURN),
            ),
            400,
            "remote image URLs are disabled",
        ),
        (
            "bad base64 in the second message",
            conversation(
                ("user", "Hi"),
                ("assistant", "ok"),
                ("user", [{"type": "image_url", "image_url": {"url": "data:image/png;base64,***"}}]),
            ),
            400,
            "not valid base64",
        ),
        (
            "more images than the engines take (limit_mm_per_prompt: one)",
            conversation(("user", IMAGE_TURN), ("assistant", "ok"), ("user", IMAGE_TURN)),
            400,
            "more than 1 image",
        ),
        (
            "pixel bomb in the second message",
            conversation(
                ("user", "Hi"),
                ("assistant", "ok"),
                ("user", [{"type": "image_url", "image_url": {"url": png_bomb()}}]),
            ),
            413,
            "pixels",
        ),
    ],
)
def test_bad_passthrough_requests_are_4xx(http, calls, name, body, status, needle):
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]["message"]
    engine_calls = calls("large")
    assert engine_calls == [] or (name == "engine refuses" and len(engine_calls) == 1)


def test_mai_passes_what_it_does_not_fit_to_the_large_model_and_says_why(http, calls):
    body = {"model": "mai", "messages": [{"role": "user", "content": "Write a poem about shapes."}]}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and response.headers["x-mai-route"] == "passthrough"
    assert response.headers["x-mai-route-reason"] == "no image"
    assert response.json()["mai"] == {"route": "passthrough", "reason": "no image", "model": "fake-large"}
    assert [call["kind"] for call in calls("large")] == ["passthrough"] and calls("small") == []
    red = "Is the shape red? [agree]"
    forced = http.post("/v1/chat/completions", json=chat_body(red, mai={"destination": "passthrough"}))
    assert forced.headers["x-mai-route"] == "passthrough" and "warning" not in forced.headers
    assert "mai.destination" in forced.headers["x-mai-route-reason"]
    # The old name, for one release: served the same, and warned.
    old = http.post("/v1/chat/completions", json=chat_body(red, mai={"route": "passthrough"}))
    assert old.headers["x-mai-route"] == "passthrough" and "mai.route is renamed" in old.headers["warning"]
    cascade = http.post("/v1/chat/completions", json=chat_body("Is the shape red? [agree]", max_tokens=1024))
    assert cascade.headers["x-mai-route"] == "agree_short"


# ---------------------------------------------------------------- audits across ingress replicas


@pytest.fixture(scope="module")
def audited(server):
    """A third app on /audited: every early exit audited, two ingress replicas reporting every 0.5 s."""
    client, _, _ = server
    config = AppConfig.model_validate(
        CONFIG
        | {
            "cascade": CONFIG["cascade"]
            | {
                "audit": {"rate": 1.0, "report_interval_s": 0.5},
                "adaptive": {"mode": "learn", "explore": 0.0},
            },
            "ingress": {"autoscaling": {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 8}},
            "classes": {"tasks": ["pope"]},
        }
    )
    handles = run_app(config, "audited", "/audited")
    yield client, handles
    serve.delete("audited")


@pytest.fixture(scope="module")
def purged(server):
    """An app on /purged: the answer cache in each of two ingress replicas' memory, reports every 0.5 s."""
    client, _, _ = server
    config = AppConfig.model_validate(
        CONFIG
        | {
            "cascade": CONFIG["cascade"] | {"audit": {"report_interval_s": 0.5}},
            "ingress": {"autoscaling": {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 8}},
            "cache": {"enabled": True},
        }
    )
    run_app(config, "purged", "/purged")
    yield client
    serve.delete("purged")


def test_an_admin_purge_through_one_replica_reaches_the_other_replicas_memory(purged):
    from collections import Counter

    def statuses(count: int) -> Counter:
        body = chat_body("Is the shape red? [agree]")
        return Counter(
            purged.post("/purged/v1/chat/completions", json=body).headers["x-mai-cache"] for _ in range(count)
        )

    # 30 requests one at a time reach both replicas (each with odds of 1 in 2**29 against): each ran the
    # question once and kept the answer in its own memory.
    assert statuses(30) == Counter(miss=2, hit=28)
    reply = purged.post("/purged/v1/mai/cache/purge", json={"all": True})  # the anonymous caller: an admin
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"purged": 1, "store": "memory", "others_within_s": 0.5}
    time.sleep(2.0)  # past the other replica's next report, which carries the purge to it
    assert statuses(30) == Counter(miss=2, hit=28)  # both forgot it: each runs it once again


def _stats_when(client, ready, timeout_s=30.0) -> dict:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        stats = client.get("/audited/v1/mai/stats").json()
        if ready(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.5)


def test_audits_run_after_the_reply_and_every_replica_counts_in_one_view(audited):
    import ray

    from harness.local_server import replica_actors

    client, handles = audited
    for index in range(12):
        body = chat_body("Is the shape red? [agree]", mai={"task": "pope"})
        reply = client.post(
            "/audited/v1/chat/completions", json=body, headers={"x-request-id": f"aud-{index}"}
        )
        assert reply.status_code == 200 and reply.json()["mai"]["route"] == "agree_short"
        trace = reply.json()["mai"]["trace"]
        assert (
            trace["plan"] == "sequential" and "of 50 observations; the default plan" in trace["plan_reason"]
        )

    def complete(stats):
        audit = stats.get("classes", {}).get("yes_no/pope", {}).get("audit", {})
        return audit.get("audited") == 12

    stats = _stats_when(client, complete)
    entry = stats["classes"]["yes_no/pope"]
    assert entry["requests"] == 12 and entry["routes"] == {"agree_short": 12}  # both replicas, one view
    assert entry["audit"]["audited"] == 12 and entry["audit"]["by_route"]["agree_short"]["audited"] == 12
    assert stats["audit"]["extra_token_share"] > 0
    # The plans' observations of both replicas, merged: every request settled at stage 1.
    assert entry["plans"] == {"sequential": 12}
    assert entry["plan"]["estimates"]["requests"] == 12 and entry["plan"]["estimates"]["p1"] == 1.0
    # The audit's reference is always allowed; reason-first is not until audits of its exit bound it.
    assert set(entry["plan"]["allowed"]) == {"sequential", "eager", "full-transfer"}
    # The audits' engine calls carry the audit request id; the served calls do not.
    engine_ids = [
        call["request_id"] for role in ("small", "large") for call in handles[role].calls.remote().result()
    ]
    audit_ids = {engine_id for engine_id in engine_ids if engine_id.startswith("mai-audit-aud-")}
    assert {engine_id.split("-")[3] for engine_id in audit_ids} == {str(index) for index in range(12)}
    assert any("-transfer_large-transfer-" in engine_id for engine_id in audit_ids)

    # The stats holder dies: Serve replaces it, and the replicas' next reports restore the whole view.
    [holder] = [name for name in replica_actors("StatsHolder") if "audited" in name]
    ray.kill(ray.get_actor(holder, namespace="serve"), no_restart=True)
    restored = _stats_when(client, complete, timeout_s=60.0)
    assert restored["classes"]["yes_no/pope"]["requests"] == 12
