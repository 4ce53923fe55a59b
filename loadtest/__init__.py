"""Load tests, benchmarks, fault drills and fuzzing (run from the repository root)."""
