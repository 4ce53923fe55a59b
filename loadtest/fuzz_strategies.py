"""The hypothesis strategies of the fuzzer's own inputs (``loadtest.fuzz``): ``near-valid`` requests
(a real PNG with the question, choices, answer kind, options, max_tokens, model and image drawn) and
``shapes`` (valid requests with images of any size and aspect ratio and questions of any length, and
JSON bodies nested past the parser's depth limit). Each maps an operation's path to its strategy."""

from __future__ import annotations


def near_valid_strategies():
    """Hypothesis strategies of chat and native requests that are valid but for what is drawn."""
    from hypothesis import strategies as st

    from harness.datasets import sample_png_data_url
    from serve_app.core.answers import ANSWER_KINDS

    png = sample_png_data_url()
    text = st.text(max_size=300)
    choices = st.none() | st.lists(st.text(max_size=40), min_size=0, max_size=30)
    kind = st.none() | st.sampled_from([*ANSWER_KINDS, "essay", ""])
    options = st.none() | st.fixed_dictionaries(
        {},
        optional={
            "stage2_answer": st.sampled_from(["inline", "two_stage", "three_stage"]),
            "eager_reasoning": st.booleans() | st.integers(),
            "transfer_form": st.sampled_from(["reference", "hint", "bogus"]),
            "transfer_selector": st.sampled_from(["full", "top-20%", ""]),
            "on_large_failure": st.sampled_from(["error", "small", "retry"]),
            "unknown_option": st.integers(),
        },
    )
    image = st.sampled_from(
        [
            png,
            png[len("data:image/png;base64,") :],
            png[:60],
            "data:image/png;base64,!!!",
            "https://example.com/a.png",
            "file:///etc/passwd",
            "",
        ]
    )
    max_tokens = st.none() | st.integers(min_value=-5, max_value=100_000)
    model = st.sampled_from(
        [
            "mai",
            "mai-small",
            "mai-large",
            "mai-small-reason",
            "mai-large-reason",
            "mai-transfer",
            "gpt-4o",
            "",
        ]
    )

    def strip_none(body: dict) -> dict:
        return {key: value for key, value in body.items() if value is not None}

    chat = st.builds(
        lambda m, q, i, c, k, o, t, stream: strip_none(
            {
                "model": m,
                "max_tokens": t,
                "stream": stream,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": i}},
                            {"type": "text", "text": q},
                        ],
                    }
                ],
                "mai": strip_none({"choices": c, "answer_type": k, "options": o}) or None,
            }
        ),
        model,
        text,
        image,
        choices,
        kind,
        options,
        max_tokens,
        st.booleans(),
    )
    answer = st.builds(
        lambda q, i, c, k, o, t, p: strip_none(
            {
                "image": i,
                "question": q,
                "choices": c,
                "answer_type": k,
                "options": o,
                "max_tokens": t,
                "policy": p,
            }
        ),
        text,
        image,
        choices,
        kind,
        options,
        max_tokens,
        st.none() | st.sampled_from(["cascade", "small", "large", "transfer", "small-reason", "everything"]),
    )
    return {"/v1/chat/completions": chat, "/v1/mai/answer": answer}


def shape_strategies(model_ids: list[str], max_pixels: int = 4096 * 4096, max_chars: int = 8000):
    """Hypothesis strategies of valid requests with images of any size and aspect ratio and questions
    of any length (``shapes`` mode), and of JSON bodies nested past the parser's depth limit."""
    import base64
    import io

    from hypothesis import strategies as st
    from PIL import Image

    @st.composite
    def image(draw) -> str:
        side = draw(st.integers(min_value=1, max_value=64))
        ratio = draw(st.integers(min_value=1, max_value=10_000))
        long_side = max(1, min(side * ratio, max_pixels // side))
        width, height = (side, long_side) if draw(st.booleans()) else (long_side, side)
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, "PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

    question = st.integers(min_value=1, max_value=max_chars).map(
        lambda n: ("What colour is the shape? " + "and the word " * (n // 13 + 1))[:n]
    )
    models = ["mai", "mai-large", *model_ids[-1:]]
    chat = st.builds(
        lambda model, url, text: {
            "model": model,
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": url}},
                        {"type": "text", "text": text},
                    ],
                }
            ],
        },
        st.sampled_from(models),
        image(),
        question,
    )
    deep = st.integers(min_value=33, max_value=200_000).map(
        lambda n: b'{"model": "mai", "x": ' + b"[" * n + b"]" * n + b"}"
    )
    answer = st.builds(
        lambda url, text: {"image": url, "question": text, "policy": "large"}, image(), question
    )
    return {"/v1/chat/completions": st.one_of(chat, chat, deep), "/v1/mai/answer": answer}
