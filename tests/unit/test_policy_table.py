"""Each policy means on every shipped config what the policy table in README.md and docs/api.md says:
the options a request of each policy resolves to, the way the ingress resolves them."""

import re
from pathlib import Path

import pytest
import yaml

from serve_app.config import load_app_config
from serve_app.core.contracts import Policy

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(path.name for path in (ROOT / "configs").glob("*.yaml"))
ROW = re.compile(r"^\| `mai[^|]*\| (?P<policies>[^|]+)\| (?P<runs>[^|]+)\|", re.MULTILINE)


def readme_policies() -> dict[Policy, str]:
    """The README's policy table: each policy and what runs under it."""
    table = (ROOT / "README.md").read_text().split("### Policies", 1)[1].split("\n## ", 1)[0]
    rows: dict[Policy, str] = {}
    for row in ROW.finditer(table):
        for name in re.findall(r"`([a-z-]+)`", row["policies"]):
            rows[Policy(name)] = row["runs"]
    return rows


def documented_stage2() -> dict[Policy, str]:
    """How each reasoning policy yields its answer by default, per README and docs/api.md."""
    api = (ROOT / "docs" / "api.md").read_text()
    default = re.search(
        r"Default: `(\w+)` for `cascade`/`transfer`, `(\w+)` for the `\*-reason` baselines", api
    )
    assert default, "docs/api.md no longer states stage2_answer's default per policy"
    expected = {Policy.CASCADE: default[1], Policy.TRANSFER: default[1]}
    for policy, runs in readme_policies().items():
        if "Stage 2 answer prompt" in runs:
            expected[policy] = "two_stage"
    assert expected[Policy.SMALL_REASON] == expected[Policy.LARGE_REASON] == default[2]
    return expected


def test_the_readme_table_names_every_policy():
    assert set(readme_policies()) == set(Policy)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_policy_resolves_on_every_shipped_config_as_documented(name):
    [application] = yaml.safe_load((ROOT / "configs" / name).read_text())["applications"]
    cascade = load_app_config(application["args"]).cascade
    for policy, stage2 in documented_stage2().items():
        options = cascade.request_options({"policy": policy})
        assert options.policy is policy
        assert options.resolved_stage2_answer() == stage2, (name, policy)


@pytest.mark.parametrize("server", ["inline", "two_stage"])
def test_the_servers_stage2_answer_is_the_cascades_and_transfers_only(server):
    [application] = yaml.safe_load((ROOT / "configs" / "mai-cpu.yaml").read_text())["applications"]
    args = application["args"] | {"cascade": application["args"]["cascade"] | {"stage2_answer": server}}
    cascade = load_app_config(args).cascade
    for policy in (Policy.CASCADE, Policy.TRANSFER):
        assert cascade.request_options({"policy": policy}).resolved_stage2_answer() == server
    for policy in (Policy.SMALL_REASON, Policy.LARGE_REASON):
        assert cascade.request_options({"policy": policy}).resolved_stage2_answer() == "two_stage"
        asked = cascade.request_options({"policy": policy, "stage2_answer": "inline"})
        assert asked.resolved_stage2_answer() == "inline"  # the request's own choice wins
