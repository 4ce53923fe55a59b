"""The model tier: what answers the cascade's calls (plain values, ``model_server``) and OpenAI chat
requests (ray.serve.llm's ``ChatCompletionRequest``)."""
