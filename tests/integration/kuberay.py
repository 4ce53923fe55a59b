"""What the KubeRay tests share: k8s/render.py loaded as a module (it is a script, not a package), the
schema of a vendored KubeRay CRD, which the manifests are validated against (and its pod template's,
which the other manifests' pods are), the checks of the pods' volumes that the RayService and the RayJob
share (/dev/shm, the model cache read-only, where the containers write), and those of who may do what
(API keys from their Secret, mounted where the application reads them, Ray's token, non-root pods with
read-only root filesystems, no Kubernetes API token but the autoscaler's, HF_TOKEN only where the
checkpoints are downloaded, the NetworkPolicy), and the upgrade types KubeRay takes."""

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


@functools.cache
def pod_template_schema() -> dict[str, Any]:
    """The schema of a pod template (metadata, spec) as KubeRay's RayService CRD embeds Kubernetes' own,
    closed as ``strict_crd_schema`` closes it: the pods of the Job and the Pod the other manifests hold
    are checked against it, so a misspelt field fails rather than being dropped."""
    service = strict_crd_schema("ray.io_rayservices.yaml")["properties"]["spec"]
    head = service["properties"]["rayClusterConfig"]["properties"]["headGroupSpec"]
    return head["properties"]["template"]


# The kinds of k8s/'s manifests that hold no pod.
NO_PODS = {"PersistentVolumeClaim", "ConfigMap", "NetworkPolicy"}


def manifest_documents() -> dict[str, dict[str, Any]]:
    """Every document of the manifests one applies (k8s/*.yaml but the templates), by "file kind/name"."""
    documents = {}
    for path in sorted((ROOT / "k8s").glob("*.yaml")):
        if not path.name.endswith(".template.yaml"):
            for document in yaml.safe_load_all(path.read_text()):
                documents[f"{path.name} {document['kind']}/{document['metadata']['name']}"] = document
    return documents


def document_pods(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod specs a document makes, by name: a RayService's or RayJob's head and worker groups and a
    RayJob's submitter, a Job's pod, a Pod; none for the kinds of ``NO_PODS`` (any other kind fails)."""
    kind, spec = document["kind"], document.get("spec") or {}
    if kind in NO_PODS:
        return {}
    if kind in ("RayService", "RayJob"):
        cluster = spec["rayClusterConfig"] if kind == "RayService" else spec["rayClusterSpec"]
        pods = {name: group["template"]["spec"] for name, group in pod_groups(cluster).items()}
        if "submitterPodTemplate" in spec:
            pods["submitter"] = spec["submitterPodTemplate"]["spec"]
        return pods
    if kind == "Job":
        return {"job": spec["template"]["spec"]}
    if kind == "Pod":
        return {"pod": spec}
    raise AssertionError(f"a {kind} in k8s/: say where its pods are (tests/integration/kuberay.py)")


def manifest_pods() -> dict[str, dict[str, Any]]:
    """Every pod spec of every manifest one applies, by "file kind/name pod"."""
    return {
        f"{where} {name}": pod
        for where, document in manifest_documents().items()
        for name, pod in document_pods(document).items()
    }


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


def mount_at(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict, dict] | None:
    """(the mount, its pod volume) that holds ``path`` in ``container``: the deepest mount whose mountPath
    is ``path`` or a folder above it; None when the path is on the container's root filesystem."""
    from pathlib import PurePosixPath

    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    holding = [
        mount
        for mount in container.get("volumeMounts", [])
        if PurePosixPath(path).is_relative_to(mount["mountPath"])
    ]
    if not holding:
        return None
    mount = max(holding, key=lambda mount: len(PurePosixPath(mount["mountPath"]).parts))
    return mount, volumes[mount["name"]]


def writable_emptydir(pod: dict[str, Any], container: dict[str, Any], path: str) -> bool:
    """``path`` lies on an emptyDir the container mounts read-write (its own for the pod's life)."""
    found = mount_at(pod, container, path)
    return found is not None and not found[0].get("readOnly") and isinstance(found[1].get("emptyDir"), dict)


def env_values(container: dict[str, Any]) -> dict[str, str | None]:
    return {item["name"]: item.get("value") for item in container.get("env", [])}


def check_model_cache(cluster: dict[str, Any], claim: dict[str, Any]) -> None:
    """Every GPU pod's containers mount ``claim`` read-only at the HF_HOME their env names (the mount
    and the volume both read-only) and never fetch from the hub (HF_HUB_OFFLINE=1); vLLM's compile cache
    (VLLM_CACHE_ROOT) is the pod's own, on a writable emptyDir. No pod of ``cluster`` may write the claim."""
    name_of_claim = claim["metadata"]["name"]
    for name, group in gpu_groups(cluster).items():
        pod = group["template"]["spec"]
        for container in pod["containers"]:
            env = env_values(container)
            assert env.get("HF_HOME"), f"{name}: no HF_HOME"
            volume = mounted(group, container).get(env["HF_HOME"])
            assert volume is not None, f"{name}: nothing is mounted at HF_HOME {env['HF_HOME']}"
            read_only_claim = {"claimName": name_of_claim, "readOnly": True}
            assert volume.get("persistentVolumeClaim") == read_only_claim, f"{name}: {volume}"
            [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == env["HF_HOME"]]
            assert mount.get("readOnly") is True, f"{name}: the model cache is mounted writable"
            assert env.get("HF_HUB_OFFLINE") == "1", f"{name}: HF_HUB_OFFLINE is not 1"
            cache_root = env.get("VLLM_CACHE_ROOT")
            assert cache_root and writable_emptydir(pod, container, cache_root), f"{name}: {cache_root}"
    for name, group in pod_groups(cluster).items():
        pod = group["template"]["spec"]
        for volume in pod.get("volumes", []):
            source = volume.get("persistentVolumeClaim") or {}
            if source.get("claimName") == name_of_claim:
                assert source.get("readOnly") is True, f"{name}: {volume}"


# Where a container writes, with the root filesystem read-only: /tmp (Ray's /tmp/ray, vLLM's sockets,
# Python's temporary files) and the caches, which these variables point into /home/ray/.cache.
WRITABLE_PATHS = ("/tmp", "/home/ray/.cache")
CACHE_ENV = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TRITON_HOME", "CUDA_CACHE_PATH", "VLLM_CACHE_ROOT")
RAY_CACHE_ENV = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TRITON_HOME", "CUDA_CACHE_PATH")  # every Ray container
RAY_LOGS = "/tmp/ray"
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def check_writable_paths(pod: dict[str, Any], container: dict[str, Any], where: str) -> None:
    """``container`` can write /tmp and /home/ray/.cache (writable emptyDirs), and every cache its env
    names lies on one of them."""
    for path in WRITABLE_PATHS:
        assert writable_emptydir(pod, container, path), f"{where}: {path} is not a writable emptyDir"
    env = env_values(container)
    for variable in CACHE_ENV:
        if variable in env:
            assert env[variable] and writable_emptydir(pod, container, env[variable]), f"{where}: {variable}"


def check_writable(cluster: dict[str, Any]) -> None:
    """Every Ray container writes only to emptyDirs: /tmp, /home/ray/.cache and the caches its env points
    there (``RAY_CACHE_ENV``); on the head, Ray's logs (/tmp/ray) are on a volume the autoscaler mounts
    at the same place, and the autoscaler has a writable /tmp of its own."""
    for name, group in pod_groups(cluster).items():
        pod = group["template"]["spec"]
        for container in pod["containers"]:
            where = f"{name}: {container['name']}"
            check_writable_paths(pod, container, where)
            missing = set(RAY_CACHE_ENV) - set(env_values(container))
            assert not missing, f"{where}: no {sorted(missing)}"
    head = cluster["headGroupSpec"]["template"]["spec"]
    if cluster.get("enableInTreeAutoscaling"):
        autoscaler = {"volumeMounts": (cluster.get("autoscalerOptions") or {}).get("volumeMounts", [])}
        assert writable_emptydir(head, autoscaler, "/tmp"), "autoscaler: /tmp is not a writable emptyDir"
        logs = mount_at(head, autoscaler, RAY_LOGS)
        assert logs is not None and logs[0]["mountPath"] == RAY_LOGS, "autoscaler: no /tmp/ray of its own"
        assert logs == mount_at(head, head["containers"][0], RAY_LOGS), "autoscaler: not the head's /tmp/ray"
        assert writable_emptydir(head, autoscaler, RAY_LOGS), "autoscaler: /tmp/ray is not writable"


def service_account_token_volumes(pod: dict[str, Any]) -> set[str]:
    """The pod's volumes that project a service-account token."""
    return {
        volume["name"]
        for volume in pod.get("volumes", [])
        for source in (volume.get("projected") or {}).get("sources", [])
        if "serviceAccountToken" in source
    }


def check_no_api_token(pod: dict[str, Any], where: str) -> None:
    """The pod mounts no Kubernetes API token by default (automountServiceAccountToken: false), and none
    of its containers mounts one itself."""
    assert pod.get("automountServiceAccountToken") is False, f"{where}: automountServiceAccountToken"
    tokens = service_account_token_volumes(pod)
    for container in pod.get("initContainers", []) + pod["containers"]:
        mounts = {mount["name"] for mount in container.get("volumeMounts", [])}
        assert not mounts & tokens, f"{where}: {container['name']} mounts a service-account token"


def check_api_tokens(cluster: dict[str, Any]) -> None:
    """No pod of ``cluster`` has a Kubernetes API token but the autoscaler, which mounts the head's
    service-account token (token, CA, namespace) read-only where its client reads it."""
    for name, group in pod_groups(cluster).items():
        check_no_api_token(group["template"]["spec"], name)
    if cluster.get("enableInTreeAutoscaling"):
        head = cluster["headGroupSpec"]["template"]["spec"]
        mounts = (cluster.get("autoscalerOptions") or {}).get("volumeMounts", [])
        [token] = [m for m in mounts if m["name"] in service_account_token_volumes(head)]
        assert token == {"name": token["name"], "mountPath": SERVICE_ACCOUNT_PATH, "readOnly": True}, token
        [volume] = [v for v in head["volumes"] if v["name"] == token["name"]]
        sources = volume["projected"]["sources"]
        assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}} in sources, sources
        assert any((s.get("configMap") or {}).get("name") == "kube-root-ca.crt" for s in sources), sources


# Who may do what. The names the manifests, k8s/networkpolicy.yaml, docs/kubernetes.md and
# docs/keys-and-security.md share.
API_KEYS_SECRET = {"name": "mai-api-keys", "key": "api-keys"}
RAY_TOKEN_SECRET = "mai-ray-token"
RAY_TOKEN_KEY = "auth_token"  # the key KubeRay reads the token from (RAY_AUTH_TOKEN_SECRET_KEY)
RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # what Ray reads; KubeRay sets
RAY_PODS = {"matchLabels": {"ray.io/is-ray-node": "yes"}}  # KubeRay's label on every Ray pod
# The RayService's spec.upgradeStrategy.type values KubeRay accepts (its CRD lists none:
# ray-operator/controllers/ray/utils/validation.go at the vendored commit), and the fields it ignores.
RAYSERVICE_UPGRADE_TYPES = ("NewCluster", "NewClusterWithIncrementalUpgrade", "None")
IGNORED_RAYSERVICE_FIELDS = ("serviceUnhealthySecondThreshold", "deploymentUnhealthySecondThreshold")


def check_container_security(pod: dict[str, Any], container: dict[str, Any], where: str) -> None:
    """``container`` of ``pod`` (a pod spec) runs as a user other than root, which the kubelet checks
    (runAsNonRoot), cannot gain privileges, holds no capability, cannot write its root filesystem, under
    the runtime's seccomp profile."""
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
    assert context.get("readOnlyRootFilesystem") is True, f"{where}: the root filesystem is writable"


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


def api_keys_references(pod: dict[str, Any]) -> list[str]:
    """Where ``pod`` (a pod spec) refers to the API keys' Secret: its volumes, and its containers'
    variables (``secretKeyRef``) and ``envFrom``."""
    found = [
        f"volume {volume['name']}"
        for volume in pod.get("volumes", [])
        if (volume.get("secret") or {}).get("secretName") == API_KEYS_SECRET["name"]
    ]
    for container in pod.get("initContainers", []) + pod["containers"]:
        for item in container.get("env", []):
            if ((item.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") == API_KEYS_SECRET[
                "name"
            ]:
                found.append(f"{container['name']} env {item['name']}")
        for source in container.get("envFrom", []):
            if (source.get("secretRef") or {}).get("name") == API_KEYS_SECRET["name"]:
                found.append(f"{container['name']} envFrom")
    return found


def check_api_keys(cluster: dict[str, Any], keys_file: str) -> None:
    """Every pod's Ray container (an ingress replica may run on any) reads the API keys at ``keys_file``
    (the application's ``security.api_keys_file``): the mai-api-keys Secret's key as a file of a volume
    mounted read-only, as a whole folder (the kubelet updates it when the Secret changes; a subPath
    mount, never), not optional (a pod without the Secret does not start). No variable holds them: a
    variable is read once, when its container starts."""
    from pathlib import PurePosixPath

    for name, group in pod_groups(cluster).items():
        pod = group["template"]["spec"]
        ray_container = pod["containers"][0]  # KubeRay's Ray container is the first
        found = mount_at(pod, ray_container, keys_file)
        assert found is not None, f"{name}: nothing mounted at {keys_file}"
        mount, volume = found
        assert mount.get("readOnly") is True, f"{name}: the API keys are mounted writable"
        assert "subPath" not in mount and "subPathExpr" not in mount, f"{name}: a subPath is never updated"
        secret = volume.get("secret") or {}
        assert secret.get("secretName") == API_KEYS_SECRET["name"], f"{name}: {volume}"
        assert secret.get("optional") is not True, f"{name}: the pod would start without the Secret"
        relative = PurePosixPath(keys_file).relative_to(mount["mountPath"]).as_posix()
        assert {"key": API_KEYS_SECRET["key"], "path": relative} in secret.get("items", []), (
            f"{name}: {secret}"
        )
        references = api_keys_references(pod)
        assert references == [f"volume {volume['name']}"], f"{name}: {references}"


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
