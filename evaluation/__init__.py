"""mai-eval: run policies of a server on a labelled set, score, report, convert datasets."""
