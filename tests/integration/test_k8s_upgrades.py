"""What an upgrade of the RayService costs. Its upgradeStrategy starts no second cluster on a change to
rayClusterConfig: a type KubeRay accepts (the CRD lists none), on the RayService and never on its
cluster (KubeRay refuses that for a RayService's), valid against the CRD; no field KubeRay ignores; the
commands docs/kubernetes.md rolls a cluster change out with are valid (NewCluster in one apply with
the change, a running RayCluster's patch). And an API key rotation changes no manifest: every pod of
the RayService reads the keys from the mounted Secret's file, which the kubelet updates, no pod of any
manifest takes them any other way, and the docs rotate them by updating the Secret alone."""

import copy
import json
import re
import shlex
from typing import Any

import jsonschema
import pytest
import yaml

from .kuberay import (
    API_KEYS_SECRET,
    IGNORED_RAYSERVICE_FIELDS,
    RAYSERVICE_UPGRADE_TYPES,
    ROOT,
    api_keys_references,
    check_api_keys,
    load_render,
    manifest_pods,
    strict_crd_schema,
)

CRD = "ray.io_rayservices.yaml"

render = load_render()
MANIFEST = yaml.safe_load((ROOT / "k8s" / "rayservice.yaml").read_text())
TEMPLATE = yaml.safe_load((ROOT / "k8s" / "rayservice.template.yaml").read_text())
# The upgrade commands (docs/kubernetes.md) and the key rotation (docs/keys-and-security.md)
K8S_DOCS = "\n".join((ROOT / "docs" / name).read_text() for name in ("kubernetes.md", "keys-and-security.md"))


def check_upgrades(manifest: dict[str, Any]) -> None:
    """A change to ``manifest``'s rayClusterConfig starts no second cluster (``None``, a type KubeRay
    accepts, with no options: those are NewClusterWithIncrementalUpgrade's); its cluster has no
    upgradeStrategy of its own (KubeRay refuses one on a RayService's cluster); no field KubeRay ignores."""
    spec = manifest["spec"]
    strategy = spec.get("upgradeStrategy")
    assert strategy == {"type": "None"}, (
        f"upgradeStrategy {strategy}: a cluster change starts a second cluster"
    )
    assert strategy["type"] in RAYSERVICE_UPGRADE_TYPES
    assert "upgradeStrategy" not in spec["rayClusterConfig"], "KubeRay refuses it on a RayService's cluster"
    ignored = [field for field in IGNORED_RAYSERVICE_FIELDS if field in spec]
    assert not ignored, f"KubeRay ignores {ignored}"


def test_a_cluster_change_starts_no_second_cluster_and_no_field_is_ignored():
    check_upgrades(MANIFEST)
    check_upgrades(TEMPLATE)
    jsonschema.validate(MANIFEST, strict_crd_schema(CRD))  # upgradeStrategy included
    # YAML's "None" is a string (its null is null or ~), in the rendered file as in the template
    assert "\n  upgradeStrategy:\n    type: None\n" in (ROOT / "k8s" / "rayservice.yaml").read_text()


@pytest.mark.parametrize(
    "breakage",
    [
        lambda spec: spec.pop("upgradeStrategy"),  # KubeRay's default: NewCluster
        lambda spec: spec["upgradeStrategy"].update(type="NewCluster"),
        lambda spec: spec["upgradeStrategy"].update(type="none"),  # KubeRay refuses the RayService
        lambda spec: spec["upgradeStrategy"].update(type=None),  # YAML's null: the default again
        lambda spec: spec["rayClusterConfig"].update(upgradeStrategy={"type": "Recreate"}),
        lambda spec: spec.update(serviceUnhealthySecondThreshold=900),
        lambda spec: spec.update(deploymentUnhealthySecondThreshold=900),
    ],
)
def test_the_upgrade_check_fails_a_manifest_that_would_start_a_second_cluster_or_is_ignored(breakage):
    broken = copy.deepcopy(MANIFEST)
    breakage(broken["spec"])
    with pytest.raises(AssertionError):
        check_upgrades(broken)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda strategy: strategy.update(typ="NewCluster"),  # misspelt: the API server would drop it
        lambda strategy: strategy.update(clusterUpgradeOptions={"gatewayClassName": "istio"}),
    ],
)
def test_the_crd_check_reaches_the_upgrade_strategy(breakage):
    broken = copy.deepcopy(MANIFEST)
    breakage(broken["spec"]["upgradeStrategy"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, strict_crd_schema(CRD))


def _doc_patches(kind: str) -> list[tuple[str, Any]]:
    """The (type, patch) of every ``kubectl patch <kind> ...`` command of the docs."""
    script = K8S_DOCS.replace("\\\n", " ")
    found = []
    for line in re.findall(rf"^kubectl patch {kind} .*$", script, re.M):
        words = shlex.split(line.split(" #")[0])
        found.append((words[words.index("--type") + 1], json.loads(words[words.index("-p") + 1])))
    return found


def test_the_docs_roll_a_cluster_change_out_on_a_new_cluster_in_one_apply():
    # the change and NewCluster together: never the new application on the old pods
    upgrading = yaml.safe_load(render.new_cluster_text())
    jsonschema.validate(upgrading, strict_crd_schema(CRD))
    assert upgrading["spec"].pop("upgradeStrategy") == {"type": "NewCluster"}
    assert upgrading["spec"] == {k: v for k, v in MANIFEST["spec"].items() if k != "upgradeStrategy"}
    assert "NewCluster" in RAYSERVICE_UPGRADE_TYPES
    assert "python k8s/render.py --new-cluster | kubectl apply -f -" in K8S_DOCS
    assert render.main(["--new-cluster"]) == 0  # prints, writes nothing: the committed files stay
    assert render.main(["--check"]) == 0
    # a group's maxReplicas on the running RayCluster, whose spec is the RayService's cluster
    [(kind, [operation])] = _doc_patches("raycluster")
    assert kind == "json" and operation["op"] == "replace"
    _, spec, groups, index, field = operation["path"].split("/")
    group = MANIFEST["spec"]["rayClusterConfig"][groups][int(index)]
    assert (spec, field, group["groupName"]) == ("spec", "maxReplicas", "large-gpu")
    assert operation["value"] > group["maxReplicas"]
    assert "(here large-gpu's, the second group)" in K8S_DOCS
    assert not _doc_patches("rayservice")  # no patch of the RayService's cluster: its rollout is above


def test_a_key_rotation_changes_no_manifest():
    # every pod of the RayService reads the keys at the file the application names, mounted from the
    # Secret (updated by the kubelet); no pod of any manifest takes them from a variable, which is read
    # once, when its container starts
    [application] = yaml.safe_load(MANIFEST["spec"]["serveConfigV2"])["applications"]
    keys_file = application["args"]["security"]["api_keys_file"]
    check_api_keys(MANIFEST["spec"]["rayClusterConfig"], keys_file)
    holders = {where: refs for where, pod in manifest_pods().items() if (refs := api_keys_references(pod))}
    assert holders == {
        f"rayservice.yaml RayService/mai {name}": ["volume api-keys"]
        for name in ("head", "small-gpu", "large-gpu")
    }


def test_the_docs_rotate_keys_by_updating_the_secret_alone():
    name, key = API_KEYS_SECRET["name"], API_KEYS_SECRET["key"]
    update = (
        f'kubectl create secret generic {name} --from-literal={key}="$1" --dry-run=client -o yaml |\n'
        "    kubectl apply -f -"
    )
    assert update in K8S_DOCS
    # no new cluster for a rotation: no change to the pod templates, as the annotation this replaced
    assert "mai-serve/secrets-read" not in K8S_DOCS
    assert "A rotation is an update of the Secret and nothing else" in K8S_DOCS
