"""What the KubeRay tests share: k8s/render.py loaded as a module (it is a script, not a package) and
the schema of a vendored KubeRay CRD, which the manifests are validated against."""

import importlib.util
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def load_render():
    spec = importlib.util.spec_from_file_location("k8s_render", ROOT / "k8s" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def crd_schema(name: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the ``v1`` version of k8s/crd/<name> (KubeRay's, vendored)."""
    crd = yaml.safe_load((ROOT / "k8s" / "crd" / name).read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]
