"""Training the models the CPU default serves: the random-weight tiny builder and the demo models."""
