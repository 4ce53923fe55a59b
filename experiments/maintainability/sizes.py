"""Lines per top-level package, and modules per package, of two checkouts side by side.

    python experiments/maintainability/sizes.py --before /tmp/before --after . \
        --out experiments/maintainability/sizes.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

PACKAGES = ("serve_app", "deployments", "batch", "evaluation", "training", "harness", "loadtest", "tests")


def sizes(root: Path) -> dict:
    packages = {}
    for package in PACKAGES:
        modules = [path for path in (root / package).rglob("*.py") if "__pycache__" not in path.parts]
        packages[package] = {
            "lines": sum(len(path.read_text().splitlines()) for path in modules),
            "modules": sum(1 for path in modules if path.name != "__init__.py"),
        }
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    return {
        "commit": commit.strip(),
        "packages": packages,
        "docs_lines": sum(len(p.read_text().splitlines()) for p in (root / "docs").glob("*.md")),
        "results_md_lines": len((root / "bench" / "RESULTS.md").read_text().splitlines()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = {
        "command": "python experiments/maintainability/sizes.py --before <757241e> --after .",
        **{"before": sizes(args.before), "after": sizes(args.after)},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for package in PACKAGES:
        before, after = result["before"]["packages"][package], result["after"]["packages"][package]
        lines = f"{before['lines']:6} -> {after['lines']:6} lines"
        print(f"{package:12} {lines}, {before['modules']:3} -> {after['modules']:3} modules")


if __name__ == "__main__":
    main()
