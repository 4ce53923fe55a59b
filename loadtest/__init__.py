"""Load tests, benchmarks and their data (run from the repository root)."""
