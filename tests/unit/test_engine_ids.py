from hypothesis import given
from hypothesis import strategies as st

from deployments.engine_ids import EngineRequestId, parse_engine_request_id
from serve_app.clients.llm_server import engine_request_id
from serve_app.core.answers import ANSWER_KINDS
from serve_app.core.contracts import EngineCall
from serve_app.core.prompts import PromptKind

REQUEST_IDS = st.text(alphabet="abcXYZ0129._:-", min_size=1, max_size=40)
STAGES = st.sampled_from(
    ["short_small", "short_large", "reason_small", "stage2_large", "transfer_large", "explain_small"]
)


@given(
    REQUEST_IDS,
    STAGES,
    st.sampled_from(list(PromptKind)),
    st.sampled_from(ANSWER_KINDS),
    st.integers(min_value=0, max_value=10**9),
)
def test_the_format_parses_back_to_its_parts(request_id, stage, kind, answer_kind, number):
    made = EngineRequestId(request_id, stage, kind.value, answer_kind, number)
    assert parse_engine_request_id(str(made)) == made


def test_other_ids_are_not_mai_calls():
    for other in (
        None,
        "",
        "chatcmpl-123",
        "mai-only-two",
        "mai-x-Stage-simple-text-1",
        "mai-x-short_small-simple-text-n",
        "mai-x-short_small-simple-1",
    ):
        assert parse_engine_request_id(other) is None


def test_the_client_stamps_each_call_with_its_identity_and_a_fresh_number():
    call = EngineCall("eval.mai.easy-vqa-1", "transfer_large", PromptKind.TRANSFER, "yes_no")
    first, second = (
        parse_engine_request_id(engine_request_id(call)),
        parse_engine_request_id(engine_request_id(call)),
    )
    assert (first.request_id, first.stage, first.prompt_kind, first.answer_kind) == (
        "eval.mai.easy-vqa-1",
        "transfer_large",
        "transfer",
        "yes_no",
    )
    assert second.number != first.number
