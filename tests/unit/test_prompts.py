import pytest

from serve_app.core.prompts import (
    TEMPLATES,
    TRANSFER_TEMPLATES,
    PromptKind,
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


def test_messages_are_image_then_question_then_instruction():
    [message] = build_messages(IMAGE, "Which one?", ["cat", "dog"], "choice", PromptKind.SIMPLE)
    assert message["role"] == "user"
    image, question, instr = message["content"]
    assert image == {"type": "image_url", "image_url": {"url": IMAGE}}
    assert question == {"type": "text", "text": "Which one?\nA. cat\nB. dog"}
    assert instr["text"].startswith("Without thinking")


def test_all_stages_of_a_request_share_the_image_and_question_prefix():
    prefixes = []
    for prompt_kind in PromptKind:
        reasoning = "some reasoning" if prompt_kind in (PromptKind.STAGE2, PromptKind.TRANSFER) else None
        [message] = build_messages(IMAGE, "Is it red?", [], "yes_no", prompt_kind, reasoning=reasoning)
        prefixes.append(message["content"][:2])
    assert all(prefix == prefixes[0] for prefix in prefixes)


def test_question_text_letters_the_options():
    assert question_text("Q?", ["x", "y", "z"]) == "Q?\nA. x\nB. y\nC. z"
    assert question_text("  Q?  ") == "Q?"
