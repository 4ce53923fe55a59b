"""``make console-screenshot``: the console's picture in the README and docs (docs/images/console.png),
taken in a headless Chromium from the real CPU stack.

It deploys configs/mai-cpu.yaml on a local Ray in this process (or uses a running server: ``--base
http://127.0.0.1:8000``), asks each of the console's example questions through the page (the README's
first; the last, a yes/no question the demo models escalate to the small model's reasoning) so that
its live view has traffic to show, waits for the live view to read the statistics twice, and saves
the whole page.

    python docs/console_screenshot.py [--base URL] [--out docs/images/console.png]

A script beside the docs it draws for, as k8s/'s scripts sit beside what they write; the browser and
the local server it drives are harness's, shared with the console's browser tests.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from harness.browser import chromium, hooked, wait_until
from harness.local_server import config_args, deploy, local_ray
from harness.paths import ROOT

OUT = ROOT / "docs" / "images" / "console.png"
WIDTH = 1400
ANSWER_S = 300


@contextmanager
def cpu_stack() -> Iterator[str]:
    """configs/mai-cpu.yaml on a local Ray; yields its base URL."""
    with local_ray() as base:
        print("deploying configs/mai-cpu.yaml (the engines load in about a minute)", flush=True)
        deploy(config_args("mai-cpu.yaml"), timeout_s=900)
        yield base


def hook(driver: Any, name: str) -> Any:
    return hooked(driver, name)[0]


def changed(driver: Any, name: str) -> Any:
    """A condition: the hooked element's text is no longer what it is now."""
    before = hook(driver, name).text
    return lambda: hook(driver, name).text != before


def ask_example(driver: Any, index: int) -> str:
    """Click the ``index``-th example (its image and question) and ask; the answer shown."""
    button = driver.find_elements("css selector", '[data-mai="examples"] button')[index]
    name = button.find_element("css selector", "img").get_attribute("data-file")
    button.click()
    wait_until(lambda: hook(driver, "image-name").text.startswith(name), 10, "the example's image")
    done = hook(driver, "ask-form").get_attribute("data-done")
    hook(driver, "ask").click()
    wait_until(lambda: hook(driver, "ask-form").get_attribute("data-done") != done, ANSWER_S, "the answer")
    if hook(driver, "error").is_displayed():
        raise RuntimeError(f"the console showed an error: {hook(driver, 'error').text}")
    return hook(driver, "answer").text


def screenshot(base: str, out: Path) -> None:
    with chromium(WIDTH, 1000) as driver:
        driver.get(f"{base}/console")
        wait_until(
            lambda: driver.find_elements("css selector", '[data-mai="examples"] button'), 30, "the examples"
        )
        wait_until(lambda: "Connected" in hook(driver, "status").text, 60, "the connection")
        examples = len(driver.find_elements("css selector", '[data-mai="examples"] button'))
        for index in range(examples):  # the last, a yes/no question, escalates: the picture shows it
            print(f"example {index}: {ask_example(driver, index)}", flush=True)
        for _ in range(2):
            wait_until(changed(driver, "live-status"), 60, "the live view's update")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        metrics = {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)  # the whole page, no scroll
        time.sleep(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", help="a running server's URL (default: deploy configs/mai-cpu.yaml here)")
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"the picture (default: {OUT.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    with nullcontext(args.base) if args.base else cpu_stack() as base:
        screenshot(base.rstrip("/"), args.out)


if __name__ == "__main__":
    main()
