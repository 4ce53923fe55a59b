"""What the engines are configured with and what they take: the engine arguments checked before a
start (mai-check-config), the limits and generation defaults read from the models, the image budget,
the GPUs seen and where each model is placed. No engine runs here."""
