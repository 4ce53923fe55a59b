"""Pieces the tools and the tests share (mai-eval, the benchmarks, the load and fault tools, the demo
training): a local Ray Serve app for a run, the request driver, JSONL files, where datasets and results
live, easy-vqa, a headless browser, and the virtual clock the calibration replays the cascade on."""
