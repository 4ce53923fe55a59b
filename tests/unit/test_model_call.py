"""A cascade call as the model side takes it (deployments/affinity.py's ModelCall): the engine request id
vLLM logs, its affinity key, and how it crosses a deployment handle to ``complete``
(deployments/model_server.py) beside the body."""

import pickle

from hypothesis import given
from hypothesis import strategies as st

from deployments.affinity import AUDIT_PREFIX, ModelCall
from deployments.model_server import ChatBody, PlainChat
from serve_app.clients.llm_server import model_call
from serve_app.core.answers import ANSWER_KINDS
from serve_app.core.contracts import EngineCall
from serve_app.core.prompts import PromptKind

REQUEST_IDS = st.text(alphabet="abcXYZ0129._:-", min_size=1, max_size=40)
STAGES = st.sampled_from(
    ["short_small", "short_large", "reason_small", "stage2_large", "transfer_large", "explain_small"]
)
CALLS = st.builds(
    ModelCall,
    REQUEST_IDS,
    STAGES,
    st.sampled_from([kind.value for kind in PromptKind]),
    st.sampled_from(ANSWER_KINDS),
    st.integers(min_value=0, max_value=10**9),
)


@given(CALLS)
def test_the_engine_request_id_names_the_calls_parts_in_order(call):
    assert str(call) == (
        f"mai-{call.request_id}-{call.stage}-{call.prompt_kind}-{call.answer_kind}-{call.number}"
    )


@given(CALLS)
def test_a_call_survives_the_pickling_of_a_handles_arguments(call):
    """Serve pickles a handle call's arguments to the replica: the call arrives equal, its key too."""
    sent = pickle.loads(pickle.dumps(call))
    assert sent == call and type(sent) is ModelCall
    assert sent.affinity_key == call.affinity_key and str(sent) == str(call)


def test_a_calls_key_is_its_request_and_an_audits_the_audited_requests():
    assert ModelCall("r-1", "short_small", "simple", "yes_no", 1).affinity_key == "r-1"
    audit = ModelCall(AUDIT_PREFIX + "r-1", "transfer_large", "transfer", "yes_no", 2)
    assert audit.affinity_key == "r-1"


def test_the_client_stamps_each_call_with_its_identity_and_a_fresh_number():
    call = EngineCall("eval.mai.easy-vqa-1", "transfer_large", PromptKind.TRANSFER, "yes_no")
    first, second = model_call(call), model_call(call)
    assert (first.request_id, first.stage, first.prompt_kind, first.answer_kind) == (
        "eval.mai.easy-vqa-1",
        "transfer_large",
        "transfer",
        "yes_no",
    )
    assert second.number != first.number


class FakeChat(PlainChat):
    """A model deployment whose ``chat`` records what reaches it and answers with one response."""

    def __init__(self):
        self.requests = []

    async def chat(self, request, raw_request_info=None):
        from ray.serve.llm.openai_api_models import ChatCompletionResponse

        self.requests.append(request)
        choice = {"index": 0, "message": {"role": "assistant", "content": "[[Yes]]"}, "finish_reason": "stop"}
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        yield ChatCompletionResponse.model_validate({"model": "m", "choices": [choice], "usage": usage})


async def test_a_body_and_its_call_reach_complete_and_the_reply_names_its_replica():
    from serve_app.clients.llm_server import LLMServerClient

    server = FakeChat()

    class Handle:
        """A deployment handle's stand-in: the arguments pickled, as Serve sends them to a replica."""

        def __init__(self):
            self.arguments = []

        @property
        def complete(self):
            return self

        def remote(self, *args):
            self.arguments.append(args)
            return server.complete(*pickle.loads(pickle.dumps(args)))

    handle = Handle()
    client = LLMServerClient(handle, "m", logprobs=False)
    call = EngineCall("r1", "short_small", PromptKind.SIMPLE, "yes_no")
    completion = await client.complete([{"role": "user", "content": "Hi"}], max_tokens=4, call=call)
    [(body, sent)] = handle.arguments
    assert isinstance(body, ChatBody) and isinstance(sent, ModelCall)
    assert (sent.request_id, sent.stage, sent.prompt_kind, sent.answer_kind) == (
        "r1",
        "short_small",
        "simple",
        "yes_no",
    )
    [request] = server.requests
    assert request.request_id == body["request_id"] == str(sent)  # what vLLM logs
    assert completion.text == "[[Yes]]"
    assert completion.replica is None  # outside Serve; a replica's unique id inside one


async def test_inside_a_replica_the_reply_names_it(monkeypatch):
    from types import SimpleNamespace

    from ray import serve

    context = SimpleNamespace(replica_id=SimpleNamespace(unique_id="replica-7"))
    monkeypatch.setattr(serve, "get_replica_context", lambda: context)
    reply = await FakeChat().complete(
        ChatBody({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
        ModelCall("r1", "short_small", "simple", "yes_no", 1),
    )
    assert (
        reply["replica"] == "replica-7" and reply["response"]["choices"][0]["message"]["content"] == "[[Yes]]"
    )
