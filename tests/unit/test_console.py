"""``GET /console``: the page's files served by the ingress's own app, with a strict
Content-Security-Policy, nothing else of the package, and nothing in the page that loads from elsewhere
or runs inline (the browser tests, tests/integration/test_console_page.py and
tests/e2e/test_console.py, drive it)."""

import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.edge.console import CSP, console_files
from serve_app.telemetry.settings import TelemetrySettings

from .fakes import ScriptedVLM
from .ingress_replica import CONFIG, client_of, replica

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "serve_app" / "console"
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


@pytest.fixture(scope="module")
def client():
    simple = {PromptKind.SIMPLE: "[[yes]]"}
    return client_of(replica(ScriptedVLM(simple), ScriptedVLM(simple)))


def test_the_page_and_every_file_it_loads_come_with_the_policy(client):
    page = client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    loaded = re.findall(r'(?:src|href)="(console/[^"]+)"', page.text)
    assert {"console/console.css", "console/js/main.js", "console/icon.svg"} <= set(loaded)
    for path in [*loaded, "console/js/playground.js", "console/examples/shape.png"]:
        response = client.get(f"/{path}")
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
    assert client.get("/console/js/api.js").headers["content-type"].startswith("text/javascript")
    assert (
        client.get("/console/examples/shape.png").content == (ROOT / "docs/examples/shape.png").read_bytes()
    )
    assert CSP.startswith("default-src 'self'")


def test_only_the_consoles_own_files_are_served(client):
    for path in ("/console/../config.py", "/console/..%2fconfig.py", "/console/nothing.js", "/console/js"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] in ("not_found", None)
    served = set(console_files())
    assert not any(name.endswith(".py") for name in served)
    for path in ("/console/", "/console/index.html"):  # the page's links are relative to /console
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 308 and response.headers["location"] == "../console"
    assert client.head("/console").status_code == 200


def test_with_api_keys_the_page_loads_but_its_settings_need_the_key():
    import hashlib

    simple = {PromptKind.SIMPLE: "[[yes]]"}
    keyed = client_of(
        replica(ScriptedVLM(simple), ScriptedVLM(simple), api_keys=(hashlib.sha256(b"k1").digest(),))
    )
    assert keyed.get("/console").status_code == 200
    assert keyed.get("/console/js/main.js").status_code == 200
    refused = keyed.get("/console/settings.json")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    allowed = keyed.get("/console/settings.json", headers={"authorization": "Bearer k1"})
    assert allowed.status_code == 200 and allowed.headers["content-security-policy"] == CSP


def test_the_settings_name_what_a_request_may_set_here(client):
    settings = client.get("/console/settings.json").json()
    assert settings["plans"] == [plan.value for plan in Plan]
    assert "full" in settings["transfer_selectors"]
    assert settings["report_interval_s"] == 5.0
    assert settings["trace_url"] == ""  # no telemetry.trace_url: the page shows a trace id as text


def test_the_settings_carry_the_operators_link_to_a_trace():
    simple = {PromptKind.SIMPLE: "[[yes]]"}
    template = "https://tempo.example.internal/explore?trace={trace_id}"
    config = CONFIG.model_copy(update={"telemetry": TelemetrySettings(trace_url=template)})
    settings = client_of(replica(ScriptedVLM(simple), ScriptedVLM(simple), config)).get(
        "/console/settings.json"
    )
    assert settings.json()["trace_url"] == template
    assert settings.headers["content-security-policy"] == CSP
    # The page builds the link from that template alone, with DOM APIs, opened apart from the console.
    timeline = (CONSOLE / "js" / "timeline.js").read_text()
    assert 'el("a", { href, rel: "noopener noreferrer", target: "_blank"' in timeline
    assert "setTraceUrl(settings.trace_url)" in (CONSOLE / "js" / "main.js").read_text()


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text += data


def test_the_page_has_no_inline_code_and_names_every_hook():
    parser = _Tags()
    parser.feed((CONSOLE / "index.html").read_text())
    assert parser.script_text.strip() == ""
    for tag, attrs in parser.tags:
        assert "style" not in attrs, tag
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "script":
            assert attrs.get("src", "").startswith("console/"), attrs
    hooks = {attrs.get("data-mai") for _, attrs in parser.tags}
    assert {"image", "question", "ask", "answer", "route"} <= hooks
    scripts = "".join(path.read_text() for path in (CONSOLE / "js").glob("*.js"))
    for hook in ("stage", "class"):  # made by the scripts, one per stage bar and per class
        assert f'"data-mai": "{hook}"' in scripts
    assert "innerHTML" not in scripts and "eval(" not in scripts and "localStorage" not in scripts


def test_nothing_in_the_console_points_outside_the_server():
    for path in CONSOLE.rglob("*"):
        if path.suffix not in {".html", ".css", ".js", ".svg"}:
            continue
        text = path.read_text().replace(SVG_NAMESPACE, "")
        assert not re.search(r"https?:|//[a-z0-9.-]+\.[a-z]{2,}", text, re.IGNORECASE), path
        assert "@import" not in text and "url(" not in text, path


def test_every_console_file_ships_in_the_package():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = package_data["serve_app"]
    root = ROOT / "serve_app"
    shipped = {path for pattern in patterns for path in root.glob(pattern) if path.is_file()}
    assert set(console_files()) == {str(path.relative_to(CONSOLE)) for path in shipped}
    assert all(path.is_relative_to(CONSOLE) for path in shipped)
