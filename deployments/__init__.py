"""The model tier: what answers the cascade's calls (plain values, ``plain_chat``) and OpenAI chat
requests (ray.serve.llm's ``ChatCompletionRequest``)."""
