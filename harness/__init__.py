"""Pieces the tools share (mai-eval, the benchmarks, the load and fault tools, the demo training): a local
Ray Serve app for a run, the request driver, JSONL files, where datasets and results live, and easy-vqa."""
