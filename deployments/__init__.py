"""The model tier: what answers an OpenAI ChatCompletionRequest."""
