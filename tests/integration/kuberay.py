"""What the KubeRay tests share: k8s/render.py loaded as a module (it is a script, not a package), the
schema of a vendored KubeRay CRD, which the manifests are validated against, the checks of the pods'
volumes that the RayService and the RayJob share (/dev/shm, the model cache), and those of who may do
what (API keys from their Secret, Ray's token, non-root pods, the NetworkPolicy)."""

import copy
import functools
import importlib.util
import re
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


@functools.cache
def strict_crd_schema(name: str) -> dict[str, Any]:
    """``crd_schema(name)`` as the API server applies it: a field the schema does not list is pruned
    (dropped without an error), so here it fails validation. Objects whose schema lists no properties
    (``metadata``) or keeps unknown fields stay open."""

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    schema = copy.deepcopy(crd_schema(name))
    close(schema)
    return schema


def pod_groups(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The head and each worker group of a RayCluster spec, by name."""
    return {"head": cluster["headGroupSpec"]} | {g["groupName"]: g for g in cluster["workerGroupSpecs"]}


def gpu_groups(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The groups whose pods run engines: those that give Ray a GPU."""
    return {
        name: group
        for name, group in pod_groups(cluster).items()
        if float(group["rayStartParams"].get("num-gpus", "0")) > 0
    }


def mounted(group: dict[str, Any], container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath -> the pod volume ``container`` mounts there."""
    volumes = {volume["name"]: volume for volume in group["template"]["spec"].get("volumes", [])}
    return {mount["mountPath"]: volumes[mount["name"]] for mount in container.get("volumeMounts", [])}


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS: dict[str | None, int] = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_UNITS |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(quantity: str | int) -> int:
    """A Kubernetes quantity of bytes ("9Gi", "512Mi", "10G", 1024) in bytes."""
    match = _QUANTITY.match(str(quantity))
    if match is None:
        raise ValueError(f"not a byte quantity: {quantity!r}")
    return int(float(match[1]) * _UNITS[match[2]])


def vllm_message_queue_bytes() -> int:
    """The shared memory one engine's Ray executor maps on its node, as the installed vLLM sizes it: the
    scheduler's broadcast queue (VLLM_MQ_MAX_CHUNK_BYTES_MB a chunk) and a worker's response queue
    (MessageQueue's default chunk), each of MessageQueue's default number of chunks."""
    import inspect

    import vllm.envs as envs
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    defaults = inspect.signature(MessageQueue.__init__).parameters
    chunks = defaults["max_chunks"].default
    return (envs.VLLM_MQ_MAX_CHUNK_BYTES_MB * 2**20 + defaults["max_chunk_bytes"].default) * chunks


def check_shared_memory(cluster: dict[str, Any]) -> None:
    """Every pod mounts /dev/shm from a memory emptyDir whose sizeLimit holds its Ray object store
    (``object-store-memory``: Ray puts the store there only when it fits) and, on a GPU pod, vLLM's
    message queues, within the container's memory limit (tmpfs pages count against it)."""
    queues = vllm_message_queue_bytes()
    gpu = gpu_groups(cluster)
    assert gpu, "no GPU group"
    for name, group in pod_groups(cluster).items():
        store = int(group["rayStartParams"]["object-store-memory"])
        for container in group["template"]["spec"]["containers"]:
            volume = mounted(group, container).get("/dev/shm")
            assert volume is not None, f"{name}: {container['name']} mounts nothing at /dev/shm"
            empty_dir = volume.get("emptyDir") or {}
            assert empty_dir.get("medium") == "Memory", f"{name}: /dev/shm is not memory: {volume}"
            assert "sizeLimit" in empty_dir, f"{name}: /dev/shm has no sizeLimit"
            size = quantity_bytes(empty_dir["sizeLimit"])
            needed = store + (queues if name in gpu else 0)
            assert needed <= size, f"{name}: /dev/shm {empty_dir['sizeLimit']} < {needed} bytes needed"
            assert size < quantity_bytes(container["resources"]["limits"]["memory"]), name


def check_model_cache(cluster: dict[str, Any], claim: dict[str, Any]) -> None:
    """Every GPU pod's containers mount ``claim`` at the HF_HOME their env names, with VLLM_CACHE_ROOT
    under it, so the checkpoints and vLLM's compile artefacts both land on the claim."""
    from pathlib import PurePosixPath

    for name, group in gpu_groups(cluster).items():
        for container in group["template"]["spec"]["containers"]:
            env = {item["name"]: item.get("value") for item in container.get("env", [])}
            assert env.get("HF_HOME"), f"{name}: no HF_HOME"
            volume = mounted(group, container).get(env["HF_HOME"])
            assert volume is not None, f"{name}: nothing is mounted at HF_HOME {env['HF_HOME']}"
            assert volume.get("persistentVolumeClaim") == {"claimName": claim["metadata"]["name"]}, volume
            cache_root = env.get("VLLM_CACHE_ROOT")
            assert cache_root and PurePosixPath(cache_root).is_relative_to(env["HF_HOME"]), cache_root


# Who may do what. The names the manifests, k8s/networkpolicy.yaml and docs/deploying.md share.
API_KEYS_SECRET = {"name": "mai-api-keys", "key": "api-keys"}
RAY_TOKEN_SECRET = "mai-ray-token"
RAY_TOKEN_KEY = "auth_token"  # the key KubeRay reads the token from (RAY_AUTH_TOKEN_SECRET_KEY)
RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # what Ray reads; KubeRay sets
RAY_PODS = {"matchLabels": {"ray.io/is-ray-node": "yes"}}  # KubeRay's label on every Ray pod


def check_container_security(pod: dict[str, Any], container: dict[str, Any], where: str) -> None:
    """``container`` of ``pod`` (a pod spec) runs as a user other than root, which the kubelet checks
    (runAsNonRoot), cannot gain privileges, holds no capability, under the runtime's seccomp profile."""
    pod_context = pod.get("securityContext") or {}
    context = container.get("securityContext") or {}
    effective = pod_context | context  # a container's own settings win over the pod's
    assert effective.get("runAsNonRoot") is True, f"{where}: runAsNonRoot is not true"
    assert isinstance(effective.get("runAsUser"), int) and effective["runAsUser"] != 0, f"{where}: uid"
    assert effective.get("seccompProfile") == {"type": "RuntimeDefault"}, f"{where}: seccompProfile"
    assert context.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation allowed"
    assert context.get("privileged") is not True, f"{where}: privileged"
    capabilities = context.get("capabilities") or {}
    assert "ALL" in capabilities.get("drop", []), f"{where}: capabilities not dropped"
    assert not capabilities.get("add"), f"{where}: adds capabilities {capabilities.get('add')}"


def check_pod_security(cluster: dict[str, Any]) -> None:
    """Every container of every pod of ``cluster`` (init containers and the autoscaler's too) passes
    ``check_container_security``."""
    for name, group in pod_groups(cluster).items():
        pod = group["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            check_container_security(pod, container, f"{name}: {container['name']}")
    if cluster.get("enableInTreeAutoscaling"):  # KubeRay adds the autoscaler's container to the head pod
        autoscaler = {"securityContext": (cluster.get("autoscalerOptions") or {}).get("securityContext")}
        check_container_security(cluster["headGroupSpec"]["template"]["spec"], autoscaler, "autoscaler")


def check_token_auth(cluster: dict[str, Any]) -> None:
    """Ray token authentication on, with the token of the mai-ray-token Secret; no container sets
    Ray's auth variables itself (KubeRay leaves a variable a container already sets alone)."""
    assert cluster.get("authOptions") == {"mode": "token", "secretName": RAY_TOKEN_SECRET}, cluster.get(
        "authOptions"
    )
    major, minor, *_ = (int(part) for part in cluster["rayVersion"].split("."))
    assert (major, minor) >= (2, 52), "token authentication needs Ray 2.52 or later"
    for name, group in pod_groups(cluster).items():
        pod = group["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            own = {item["name"] for item in container.get("env", [])} & set(RAY_AUTH_ENV)
            assert not own, f"{name}: {container['name']} sets {sorted(own)}"


def api_keys_env(container: dict[str, Any], variable: str) -> dict[str, Any] | None:
    return next((item for item in container.get("env", []) if item["name"] == variable), None)


def check_api_keys(cluster: dict[str, Any], variable: str) -> None:
    """Every pod's Ray container (an ingress replica may run on any) has the API keys in ``variable``,
    from the mai-api-keys Secret and not optional: a pod without the Secret does not start."""
    for name, group in pod_groups(cluster).items():
        ray_container = group["template"]["spec"]["containers"][0]  # KubeRay's Ray container is the first
        item = api_keys_env(ray_container, variable)
        assert item is not None, f"{name}: no {variable}"
        assert "value" not in item, f"{name}: {variable} is written in the manifest"
        assert item.get("valueFrom") == {"secretKeyRef": API_KEYS_SECRET}, f"{name}: {item}"


# The fields of a NetworkPolicy (networking.k8s.io/v1) this project uses, and no other: a misspelt or
# misplaced field fails here rather than being dropped by the API server.
_LABELS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array"},
    },
}
_PEER = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {"podSelector": _LABELS, "namespaceSelector": _LABELS, "ipBlock": {"type": "object"}},
}
_PORT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
        "port": {"type": ["integer", "string"]},
        "endPort": {"type": "integer"},
    },
}
NETWORK_POLICY_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "networking.k8s.io/v1"},
        "kind": {"const": "NetworkPolicy"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["podSelector"],
            "properties": {
                "podSelector": _LABELS,
                "policyTypes": {"type": "array", "items": {"enum": ["Ingress", "Egress"]}},
                "ingress": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "from": {"type": "array", "items": _PEER},
                            "ports": {"type": "array", "items": _PORT},
                        },
                    },
                },
                "egress": {"type": "array"},
            },
        },
    },
}


def check_network_policy(
    policy: dict[str, Any], serve_port: int, dashboard_port: int, dashboard_peers: list[dict[str, Any]]
) -> None:
    """``policy`` isolates the Ray pods for incoming traffic and admits: every port from the Ray pods,
    ``serve_port`` from anywhere, ``dashboard_port`` from each of ``dashboard_peers``; nothing else."""
    import jsonschema

    jsonschema.validate(policy, NETWORK_POLICY_SCHEMA)
    spec = policy["spec"]
    assert spec["podSelector"] == RAY_PODS, spec["podSelector"]
    assert "Ingress" in spec.get("policyTypes", ["Ingress"]), "the policy does not isolate incoming traffic"
    rules = spec.get("ingress", [])
    among_ray_pods = [rule for rule in rules if rule.get("from") == [{"podSelector": RAY_PODS}]]
    assert [rule.get("ports") for rule in among_ray_pods] == [None], "the Ray pods: not every port"
    admitted: list[tuple[str, Any]] = []
    for rule in rules:
        if rule in among_ray_pods:
            continue
        ports = rule.get("ports")
        assert ports, f"every port open to {rule.get('from', 'anywhere')}"
        for port in ports:
            assert port.get("protocol", "TCP") == "TCP" and "endPort" not in port, port
            for peer in rule.get("from") or [None]:  # no "from": anywhere
                admitted.append((port["port"], peer))
    assert sorted(port for port, peer in admitted if peer is None) == [serve_port], admitted
    to_dashboard = [peer for port, peer in admitted if port == dashboard_port]
    assert sorted(map(str, to_dashboard)) == sorted(map(str, dashboard_peers)), to_dashboard
    others = [(port, peer) for port, peer in admitted if port not in (serve_port, dashboard_port)]
    assert not others, f"open beyond Serve's port and the dashboard: {others}"
