"""The console's page in a real headless Chromium, served by the ingress's own FastAPI app (its real
routes, API keys and statistics) in this process over *scripted* model clients: what this proves is
the page's handling of an API key and of a server that goes away, not anything about the models (the
end-to-end test, tests/e2e/test_console.py, asks the real stack).

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them when missing)."""

import hashlib
import threading
import time

import pytest
import uvicorn

from harness.browser import chromium, hooked, missing, page_errors, wait_until
from harness.local_server import free_port
from serve_app.core.prompts import PromptKind

from ..unit.fakes import ScriptedVLM
from ..unit.ingress_replica import replica

KEY = "console-test-key"


class AppServer:
    """The ingress's app under uvicorn in a thread of this process."""

    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "AppServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def keyed_server():
    from serve_app.edge.api import build_api

    simple = {PromptKind.SIMPLE: "[[yes]]"}
    ingress = replica(
        ScriptedVLM(simple), ScriptedVLM(simple), api_keys=(hashlib.sha256(KEY.encode()).digest(),)
    )
    server = AppServer(build_api(ingress, ingress.config.security)).start()
    yield server
    server.stop()


@pytest.fixture
def driver():
    problem = missing()
    assert problem is None, problem
    with chromium() as browser:
        yield browser


def hook(driver, name):
    return hooked(driver, name)[0]


def wait_for(condition, timeout=20):
    wait_until(condition, timeout, "the page's change")


def test_the_page_asks_for_the_key_shows_nothing_without_it_and_keeps_it_in_memory(keyed_server, driver):
    driver.get(f"{keyed_server.base}/console")
    wait_for(lambda: hook(driver, "key-form").is_displayed())
    assert "API key is required" in hook(driver, "status").text
    # nothing of the server's is shown without a key: no policy, no statistics
    assert driver.find_elements("css selector", '[data-mai="policy"] option') == []
    assert driver.find_elements("css selector", '[data-mai="class"]') == []

    hook(driver, "key").send_keys("not-the-key")
    hook(driver, "key").submit()
    wait_for(lambda: "not valid" in hook(driver, "status").text)
    assert driver.find_elements("css selector", '[data-mai="policy"] option') == []

    hook(driver, "key").send_keys(KEY)
    hook(driver, "key").submit()
    wait_for(lambda: driver.find_elements("css selector", '[data-mai="policy"] option'))
    assert not hook(driver, "key-form").is_displayed()
    wait_for(lambda: "Updated" in hook(driver, "live-status").text)
    stored = driver.execute_script(
        "return JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie])"
    )
    assert KEY not in stored
    assert KEY not in driver.page_source
    # the two refused /v1/models calls are the only errors the page logged
    assert all("401" in message for message in page_errors(driver))


def test_a_server_that_went_away_is_said_on_the_page(keyed_server, driver):
    driver.get(f"{keyed_server.base}/console")
    wait_for(lambda: hook(driver, "key-form").is_displayed())
    hook(driver, "key").send_keys(KEY)
    hook(driver, "key").submit()
    wait_for(lambda: "Updated" in hook(driver, "live-status").text)
    keyed_server.stop()
    wait_for(lambda: "not reachable" in hook(driver, "live-status").text, timeout=30)
    hook(driver, "question").send_keys("Is it red?")
    hook(driver, "ask").click()
    wait_for(lambda: hook(driver, "error").is_displayed())
    assert "not reachable" in hook(driver, "error").text


@pytest.fixture
def two_key_server():
    from serve_app.edge.api import build_api
    from serve_app.edge.keys import KeyRing, NamedKey

    simple = {PromptKind.SIMPLE: "[[yes]]"}
    ring = KeyRing.of(
        (
            NamedKey(name="ops", sha256=hashlib.sha256(KEY.encode()).hexdigest(), admin=True),
            NamedKey(name="team-a", sha256=hashlib.sha256(b"team-a-key").hexdigest()),
        )
    )
    ingress = replica(ScriptedVLM(simple), ScriptedVLM(simple), api_keys=ring)
    server = AppServer(build_api(ingress, ingress.config.security)).start()
    yield server
    server.stop()


def sign_in(driver, server, key):
    driver.get(f"{server.base}/console")
    wait_for(lambda: hook(driver, "key-form").is_displayed())
    hook(driver, "key").send_keys(key)
    hook(driver, "key").submit()
    wait_for(lambda: "Updated" in hook(driver, "live-status").text)


def test_an_admin_key_sees_every_keys_usage_and_another_key_none(two_key_server, driver):
    import httpx

    from ..images import chat_body

    asked = httpx.post(
        f"{two_key_server.base}/v1/chat/completions",
        json=chat_body(),
        headers={"authorization": "Bearer team-a-key"},
        timeout=30,
    )
    assert asked.status_code == 200
    sign_in(driver, two_key_server, "team-a-key")
    assert not hook(driver, "usage-block").is_displayed()  # not an admin: no usage is read

    sign_in(driver, two_key_server, KEY)
    row = '[data-mai="usage"] tr[data-key="team-a"] td'
    wait_for(lambda: driver.find_elements("css selector", row))
    assert hook(driver, "usage-block").is_displayed()
    cells = [cell.text for cell in driver.find_elements("css selector", row)]
    # team-a's one chat request, and its console's readings of the stats, admitted like any request
    assert int(cells[0]) >= 2 and cells[3] == "1"  # requests; early exits: the one answer


def test_the_forms_the_demo_models_learnt_fill_the_question(keyed_server, driver):
    sign_in(driver, keyed_server, KEY)
    wait_for(lambda: driver.find_elements("css selector", '[data-mai="forms"] button'))
    buttons = driver.find_elements("css selector", '[data-mai="forms"] button')
    count = next(b for b in buttons if b.text == "How many shapes are there?")
    assert count.get_attribute("title") == "a count question"
    count.click()
    assert hook(driver, "question").get_attribute("value") == "How many shapes are there?"
    assert all("401" in message for message in page_errors(driver))  # only the calls before the key


@pytest.fixture
def cached_server():
    from serve_app.edge.api import build_api

    simple = {PromptKind.SIMPLE: "[[yes]]"}
    ingress = replica(ScriptedVLM(simple), ScriptedVLM(simple), cache=True)
    server = AppServer(build_api(ingress, ingress.config.security)).start()
    yield server
    server.stop()


def test_the_live_view_shows_the_answer_caches_reuse(cached_server, driver):
    import httpx

    from ..images import chat_body

    driver.get(f"{cached_server.base}/console")
    wait_for(lambda: "Updated" in hook(driver, "live-status").text)
    with httpx.Client(base_url=cached_server.base) as http:
        replies = [http.post("/v1/chat/completions", json=chat_body()) for _ in range(3)]
    assert [reply.headers["x-mai-cache"] for reply in replies] == ["miss", "hit", "hit"]
    wait_for(lambda: "2 hits" in hook(driver, "cache-detail").text, timeout=30)
    assert "1 misses" in hook(driver, "cache-detail").text and "memory" in hook(driver, "cache-detail").text
    # The reading after the three requests: two of them reused (unless a reading fell between them).
    assert hook(driver, "cache").text in ("67 % reused", "100 % reused", "50 % reused", "0 % reused")
