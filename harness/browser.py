"""A real headless browser for the console: Debian's ``chromium`` and ``chromium-driver`` (``apt-get
install chromium chromium-driver``) driven by selenium, with no download. Shared by the console's
end-to-end test and ``make console-screenshot``."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Where Debian puts them; MAI_CHROMIUM / MAI_CHROMEDRIVER point elsewhere.
CHROMIUM = os.environ.get("MAI_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MAI_CHROMEDRIVER", "/usr/bin/chromedriver")
INSTALL_HINT = "install them with: sudo apt-get install -y chromium chromium-driver"


def missing() -> str | None:
    """What is missing to run the browser, or None when both binaries are there."""
    absent = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    return f"{' and '.join(absent)} not found; {INSTALL_HINT}" if absent else None


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium under selenium that keeps the page's console messages
    (``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    problem = missing()
    if problem is not None:
        raise RuntimeError(problem)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_errors(driver: Any) -> list[str]:
    """The console's error messages so far (a failed load, a blocked resource, an exception)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def resources(driver: Any) -> list[str]:
    """Every URL the page has loaded (the document and each resource it fetched)."""
    script = "return [location.href].concat(performance.getEntriesByType('resource').map(e => e.name));"
    return list(driver.execute_script(script))


def hooked(driver: Any, name: str) -> list[Any]:
    """The page's elements carrying ``data-mai="<name>"``."""
    return list(driver.find_elements("css selector", f'[data-mai="{name}"]'))


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """``condition()``'s first truthy value, polled; TimeoutError naming ``what`` when none comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise TimeoutError(f"{what} did not happen within {timeout:g} s")
