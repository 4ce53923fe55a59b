"""What the KubeRay tests share: k8s/render.py loaded as a module (it is a script, not a package), the
schema of a vendored KubeRay CRD, which the manifests are validated against, and the checks of the pods'
volumes that the RayService and the RayJob share (/dev/shm, the model cache)."""

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
