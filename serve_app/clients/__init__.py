"""How the cascade reaches the model deployments: an LLMServer handle as a cascade client
(llm_server.py), and what its failures mean (failures.py)."""
