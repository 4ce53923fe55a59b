import pytest

from serve_app.core.prompts import (
    LAYOUT_SEPARATORS,
    TEMPLATES,
    TRANSFER_TEMPLATES,
    PromptKind,
    PromptLayout,
    TransferForm,
    build_messages,
    default_transfer_form,
    instruction,
    question_text,
)

IMAGE = "data:image/png;base64,iVBORw0KGgo="


def test_appendix_c_wording():
    assert instruction(PromptKind.SIMPLE, "yes_no") == (
        "Without thinking, directly answer the question using a single word or phrase in the format: "
        "[[answer]]"
    )
    assert instruction(PromptKind.SIMPLE, "choice") == (
        "Without thinking, directly answer with the option's letter from the given choices in the format: "
        "[[answer]]."
    )
    assert instruction(PromptKind.REASONING, "text") == (
        "Please think step by step, provide a detailed explanation, then answer the question using a single "
        "word or phrase in the format: [[answer]]"
    )
    assert instruction(PromptKind.EXPLAIN, "choice") == (
        "Provide a simple explanation, then answer with the option's letter from the given choices directly "
        "in the format: [[answer]]"
    )
    assert instruction(PromptKind.STAGE2, "number", reasoning="R") == (
        "According to previous thinking: R\n Answer the question using a single word or phrase."
    )
    assert instruction(PromptKind.STAGE2, "choice", reasoning="R") == (
        "According to previous thinking: R\n Answer with the option's letter from the given choices directly."
    )


def test_every_template_exists_in_both_families():
    for kind in (PromptKind.SIMPLE, PromptKind.EXPLAIN, PromptKind.REASONING, PromptKind.STAGE2):
        assert "single word or phrase" in TEMPLATES[(kind, "short")]
        assert "option's letter from the given choices" in TEMPLATES[(kind, "choice")]
    for form in TransferForm:
        assert "single word or phrase" in TRANSFER_TEMPLATES[(form, "short")]
        assert "option's letter" in TRANSFER_TEMPLATES[(form, "choice")]
        for family in ("short", "choice"):
            assert "{reasoning}" in TRANSFER_TEMPLATES[(form, family)]


@pytest.mark.parametrize(
    ("kind", "form"),
    [("yes_no", "according"), ("number", "according"), ("choice", "reference"), ("text", "reference")],
)
def test_default_transfer_form_follows_the_paper(kind, form):
    assert default_transfer_form(kind) == form
    text = instruction(PromptKind.TRANSFER, kind, reasoning="THE REASONING")
    assert "THE REASONING" in text
    opening = (
        "According to previous thinking" if form == "according" else "The following is a reference answer"
    )
    assert text.startswith(opening)


def test_transfer_form_can_be_chosen():
    text = instruction(PromptKind.TRANSFER, "yes_no", reasoning="R", transfer_form=TransferForm.REFERENCE)
    assert text.startswith(
        "The following is a reference answer from a smaller model (it might be wrong or incomplete): R"
    )
    assert text.endswith("Answer the question using a single word or phrase.")


def test_stage2_and_transfer_need_the_reasoning():
    with pytest.raises(ValueError, match="reasoning"):
        instruction(PromptKind.STAGE2, "text")
    with pytest.raises(ValueError, match="reasoning"):
        instruction(PromptKind.TRANSFER, "text")


def test_messages_are_image_then_question_then_instruction_on_a_line_of_its_own():
    [message] = build_messages([IMAGE], "Which one?", ["cat", "dog"], "choice", PromptKind.SIMPLE)
    assert message["role"] == "user"
    image, text = message["content"]
    assert image == {"type": "image_url", "image_url": {"url": IMAGE}}
    assert text["text"] == "Which one?\nA. cat\nB. dog\n" + TEMPLATES[(PromptKind.SIMPLE, "choice")]


def test_a_model_trained_on_the_joined_layout_reads_question_and_instruction_back_to_back():
    [message] = build_messages(
        [IMAGE], "Is it red?", [], "yes_no", PromptKind.SIMPLE, layout=PromptLayout.JOINED
    )
    assert message["content"][1]["text"] == "Is it red?" + TEMPLATES[(PromptKind.SIMPLE, "short")]


@pytest.mark.parametrize("layout", list(PromptLayout))
def test_all_stages_of_a_request_share_the_image_and_question_prefix(layout):
    texts = []
    for prompt_kind in PromptKind:
        reasoning = "some reasoning" if prompt_kind in (PromptKind.STAGE2, PromptKind.TRANSFER) else None
        [message] = build_messages(
            [IMAGE], "Is it red?", [], "yes_no", prompt_kind, reasoning=reasoning, layout=layout
        )
        assert message["content"][0] == {"type": "image_url", "image_url": {"url": IMAGE}}
        texts.append(message["content"][1]["text"])
    prefix = "Is it red?" + LAYOUT_SEPARATORS[layout]
    assert all(text.startswith(prefix) for text in texts)


def test_question_text_letters_the_options():
    assert question_text("Q?", ["x", "y", "z"]) == "Q?\nA. x\nB. y\nC. z"
    assert question_text("  Q?  ") == "Q?"


def test_a_model_setting_names_exactly_the_layouts_the_prompt_builder_knows():
    import typing

    from deployments.settings import ModelDeployment

    declared = typing.get_args(ModelDeployment.model_fields["prompt_layout"].annotation)
    assert set(declared) == {layout.value for layout in PromptLayout}
    assert ModelDeployment.model_fields["prompt_layout"].default == PromptLayout.SEPARATE_LINE


@pytest.mark.parametrize("model", ["demo-small", "demo-large"])
def test_the_text_each_model_reads_after_its_chat_template(model):
    """Rendered by the model's own chat template (which joins text parts with nothing between): the
    paper's layout, which the demo models were trained on, puts the instruction on a line of its own;
    the joined layout renders exactly a message of two text parts, back to back."""
    from pathlib import Path

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(__file__).resolve().parents[2] / "models" / model))

    def rendered(messages):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    question, simple = "What is the color of the shape?", TEMPLATES[(PromptKind.SIMPLE, "short")]
    paper = build_messages([IMAGE], question, [], "text", PromptKind.SIMPLE)
    assert f"<|vision_end|>{question}\n{simple}<|im_end|>" in rendered(paper)
    joined = build_messages([IMAGE], question, [], "text", PromptKind.SIMPLE, layout=PromptLayout.JOINED)
    two_parts = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": IMAGE}},
                {"type": "text", "text": question},
                {"type": "text", "text": simple},
            ],
        }
    ]
    assert rendered(joined) == rendered(two_parts)
    assert f"{question}{simple}" in rendered(joined)
