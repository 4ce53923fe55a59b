"""mai-batch: datasets through the cascade on Ray Data (docs/batch.md)."""
