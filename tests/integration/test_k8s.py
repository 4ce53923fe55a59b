"""The KubeRay artifacts: the RayService is rendered from configs/mai.yaml (no drift), validates against
KubeRay's RayService CRD schema, and its names, ports, pins and image tags agree with each other, with
the Dockerfile and with the project's pins; every pod has /dev/shm in memory, sized for what uses it, and
every GPU pod reads its checkpoints from the model cache claim, read-only and offline, which only the
Job of k8s/model-cache.yaml writes (the checkpoints configs/mai.yaml names). Access: every pod mounts
the API keys' Secret as the file the application reads, Ray's token authentication is on, every
container runs as a user other than root without privileges on a read-only root filesystem, writing
only to emptyDirs; no pod of any manifest mounts a Kubernetes API token (the autoscaler alone mounts
one), HF_TOKEN is only in the container that downloads the checkpoints, and k8s/networkpolicy.yaml
admits from outside the Ray pods only Serve's port (and the dashboard to the KubeRay operator and the
RayJob's submitter). Upgrades and key rotations: test_k8s_upgrades.py."""

import copy
import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from .kuberay import (
    API_KEYS_SECRET,
    RAY_PODS,
    RAY_TOKEN_KEY,
    RAY_TOKEN_SECRET,
    ROOT,
    check_api_keys,
    check_api_tokens,
    check_container_security,
    check_model_cache,
    check_network_policy,
    check_no_api_token,
    check_pod_security,
    check_shared_memory,
    check_token_auth,
    check_writable,
    check_writable_paths,
    crd_schema,
    env_values,
    gpu_groups,
    load_render,
    manifest_documents,
    manifest_pods,
    mount_at,
    mounted,
    pod_groups,
    pod_template_schema,
    quantity_bytes,
    strict_crd_schema,
    vllm_message_queue_bytes,
)

CRD = "ray.io_rayservices.yaml"  # vendored: KubeRay commit feeaf72

render = load_render()
MANIFEST = yaml.safe_load((ROOT / "k8s" / "rayservice.yaml").read_text())
SERVE = yaml.safe_load(MANIFEST["spec"]["serveConfigV2"])
CLUSTER = MANIFEST["spec"]["rayClusterConfig"]
GROUPS = {group["groupName"]: group for group in CLUSTER["workerGroupSpecs"]}
CACHE_DOCUMENTS = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "k8s" / "model-cache.yaml").read_text())}
MODEL_CACHE = CACHE_DOCUMENTS["PersistentVolumeClaim"]
FILL_JOB = CACHE_DOCUMENTS["Job"]
POLICY = yaml.safe_load((ROOT / "k8s" / "networkpolicy.yaml").read_text())
# The KubeRay steps (docs/kubernetes.md) and their Access section (docs/keys-and-security.md)
K8S_DOCS = "\n".join((ROOT / "docs" / name).read_text() for name in ("kubernetes.md", "keys-and-security.md"))


def ray_pin() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [pin] = [dep for dep in pyproject["project"]["optional-dependencies"]["gpu"] if dep.startswith("ray[")]
    return pin.split("==")[1]


def schema():
    return crd_schema(CRD)


def test_the_committed_manifest_is_what_the_sources_render():
    assert (ROOT / "k8s" / "rayservice.yaml").read_text() == render.render_text(), (
        "k8s/rayservice.yaml drifted from configs/mai.yaml or the template: run `python k8s/render.py`"
    )


def test_serve_config_v2_is_configs_mai_yaml_with_each_model_pinned_and_the_mounted_keys():
    source = yaml.safe_load((ROOT / "configs" / "mai.yaml").read_text())
    expected = copy.deepcopy(source)
    for application in expected["applications"]:
        application["args"]["small"]["pin_resources"] = {"mai_small": 1}
        application["args"]["large"]["pin_resources"] = {"mai_large": 1}
        application["args"]["security"] = {"api_keys_file": "/etc/mai-api-keys/api-keys"}
    assert "security" not in source["applications"][0]["args"]  # else the renderer would override it
    assert SERVE == expected


def test_manifest_validates_against_the_rayservice_crd():
    jsonschema.validate(MANIFEST, schema())


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (
            lambda m: m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0].pop("groupName"),
            "'groupName' is a required property",
        ),
        (
            lambda m: m["spec"]["rayClusterConfig"]["autoscalerOptions"].update(version="v3"),
            "'v3' is not one of",
        ),
        (lambda m: m["spec"].update(serveConfigV2={"applications": []}), "is not of type 'string'"),
    ],
)
def test_the_schema_check_catches_broken_manifests(mutation, message):
    broken = copy.deepcopy(MANIFEST)
    mutation(broken)
    with pytest.raises(jsonschema.ValidationError, match=message):
        jsonschema.validate(broken, schema())


def test_each_model_has_a_gpu_worker_group_advertising_its_pin_and_the_head_has_no_gpu():
    assert CLUSTER["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    args = SERVE["applications"][0]["args"]
    for role, resource in (("small", "mai_small"), ("large", "mai_large")):
        owners = [name for name, group in GROUPS.items() if resource in render.advertised_resources(group)]
        assert len(owners) == 1, f"{resource} must be advertised by exactly one group, got {owners}"
        group = GROUPS[owners[0]]
        assert args[role]["pin_resources"] == {resource: 1}
        assert group["rayStartParams"]["num-gpus"] == "1" and args[role]["bundle"] == {"GPU": 1}
        [container] = group["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        # the group can hold as many engines as Serve may ask for
        assert group["maxReplicas"] >= args[role]["autoscaling"]["max_replicas"]
        # the checkpoints come from the model cache, filled by its Job: no token in a serving pod
        assert "HF_TOKEN" not in env_values(container)
    assert CLUSTER["enableInTreeAutoscaling"] is True and CLUSTER["autoscalerOptions"]["version"] == "v2"


def test_ports_probes_images_and_versions_agree():
    serve_port = SERVE["http_options"]["port"]
    dockerfile = (ROOT / "k8s" / "Dockerfile").read_text()
    [base] = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    # Ray's image for the project's Ray and Python; its CUDA major is k8s/gpu_stack.py's check
    assert base.startswith(f"rayproject/ray:{ray_pin()}-py311-cu"), base
    assert CLUSTER["rayVersion"] == ray_pin()
    templates = [CLUSTER["headGroupSpec"]["template"]] + [group["template"] for group in GROUPS.values()]
    images = set()
    for template in templates:
        for container in template["spec"]["containers"]:
            images.add(container["image"])
            ports = {port["name"]: port["containerPort"] for port in container["ports"]}
            assert ports["serve"] == serve_port and ports["metrics"] == 8080
    for group in GROUPS.values():  # a worker takes traffic while its Serve proxy answers
        [container] = group["template"]["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/-/healthz", "port": serve_port}
    # KubeRay deploys serveConfigV2 only once the head pod is ready: a head probe on Serve's port
    # (the proxy's /-/healthz, the app's /readyz) would never pass.
    for container in CLUSTER["headGroupSpec"]["template"]["spec"]["containers"]:
        probe = container.get("readinessProbe") or {}
        assert (probe.get("httpGet") or {}).get("port") not in (serve_port, "serve"), probe
    [image] = images
    assert image.endswith(f"-ray{ray_pin()}"), image
    assert f"-t {image} " in dockerfile  # the build command in the Dockerfile makes the image the pods run
    for group in [CLUSTER["headGroupSpec"], *GROUPS.values()]:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"


def test_rendering_refuses_a_template_without_a_group_for_a_pin():
    template = yaml.safe_load((ROOT / "k8s" / "rayservice.template.yaml").read_text())
    template["spec"]["rayClusterConfig"]["workerGroupSpecs"] = template["spec"]["rayClusterConfig"][
        "workerGroupSpecs"
    ][:1]
    with pytest.raises(ValueError, match="no worker group advertises 'mai_large'"):
        render.render(template, yaml.safe_load((ROOT / "configs" / "mai.yaml").read_text()))


def test_advertised_resources_reads_kuberays_quoted_json():
    assert render.advertised_resources({"rayStartParams": {"resources": '"{\\"mai_small\\": 1}"'}}) == {
        "mai_small": 1
    }
    assert render.advertised_resources({"rayStartParams": {"resources": json.dumps({"a": 2})}}) == {"a": 2}
    assert render.advertised_resources({"rayStartParams": {}}) == {}


def _vllm_metric_names() -> set[str]:
    """vLLM's metric names as Ray exports them: 'vllm:x' -> 'ray_vllm_x' (read from the installed vLLM)."""
    import vllm.v1.metrics.loggers as loggers

    names = set(re.findall(r'"(vllm:[a-z_]+)"', Path(loggers.__file__).read_text()))
    return {"ray_" + re.sub(r"[^a-zA-Z0-9_]", "_", name) for name in names}


def test_the_grafana_dashboard_queries_only_metrics_that_exist_and_shows_every_mai_metric():
    from serve_app.edge.observers import PROMETHEUS_METRICS

    dashboard = json.loads((ROOT / "k8s" / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs and all(panel["targets"] for panel in dashboard["panels"])
    used = set(re.findall(r"\bray_[a-z_]+", " ".join(exprs)))
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    ours = {
        f"ray_{name}{suffix}"
        for name, (kind, _, _) in PROMETHEUS_METRICS.items()
        for suffix in suffixes[kind]
    }
    vllm = _vllm_metric_names()
    vllm_exported = {name + suffix for name in vllm for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    serve = {"ray_serve_deployment_replica_healthy"}
    unknown = used - ours - vllm_exported - serve
    assert not unknown, f"the dashboard queries metrics nothing exports: {sorted(unknown)}"
    for name in PROMETHEUS_METRICS:
        assert any(f"ray_{name}" in expr for expr in exprs), f"no panel shows {name}"
    assert any(name.startswith("ray_vllm_") for name in used)


def test_the_image_copies_every_package_serve_and_mai_batch_import():
    """``serve run`` imports serve_app.app, the RayJob runs mai-batch: each project package either
    imports (at module level) is copied into the image, or the pod fails on its first import."""
    import subprocess
    import sys

    entry = (
        "serve_app.app",
        "batch.cli",
        "batch.runner",
        "batch.answerer",
        "batch.model_tier",
        "batch.source",
    )
    listing = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys\nfor m in {entry!r}: __import__(m)\nprint(' '.join(sys.modules))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    project = {path.name for path in ROOT.iterdir() if (path / "__init__.py").exists()}
    imported = {name.split(".")[0] for name in listing} & project
    copied = set(
        re.findall(r"^COPY --chown=\S+ (\w+) \./\1$", (ROOT / "k8s" / "Dockerfile").read_text(), re.M)
    )
    assert {"serve_app", "batch", "evaluation", "harness", "deployments"} <= imported
    assert imported <= copied, f"imported but not copied into the image: {sorted(imported - copied)}"


def test_every_pod_has_dev_shm_in_memory_sized_for_the_object_store_and_vllms_queues():
    assert set(gpu_groups(CLUSTER)) == {"small-gpu", "large-gpu"}
    check_shared_memory(CLUSTER)
    # what the GPU pods' limit holds beside the object store: one engine's two queues, 160 and 240 MiB
    assert vllm_message_queue_bytes() == (16 + 24) * 10 * 2**20


@pytest.mark.parametrize(
    "breakage",
    [
        lambda pod, container: pod.pop("volumes"),
        lambda pod, container: pod["volumes"][0]["emptyDir"].pop("medium"),
        lambda pod, container: pod["volumes"][0]["emptyDir"].pop("sizeLimit"),
        lambda pod, container: pod["volumes"][0]["emptyDir"].update(sizeLimit="8Gi"),  # the store alone
        lambda pod, container: container["volumeMounts"].pop(0),
    ],
)
def test_the_shared_memory_check_fails_a_gpu_pod_without_enough_of_it(breakage):
    cluster = copy.deepcopy(CLUSTER)
    pod = cluster["workerGroupSpecs"][1]["template"]["spec"]
    assert pod["volumes"][0]["name"] == "shm" and pod["containers"][0]["volumeMounts"][0]["name"] == "shm"
    breakage(pod, pod["containers"][0])
    with pytest.raises((AssertionError, KeyError)):
        check_shared_memory(cluster)


def test_every_gpu_pod_reads_the_model_cache_claim_at_its_hf_home_read_only():
    spec = MODEL_CACHE["spec"]
    assert MODEL_CACHE["metadata"]["name"] == "mai-model-cache"
    # pods on several nodes share it; the storage class is the user's (the file documents the choice)
    assert spec["accessModes"] == ["ReadWriteMany"] and "storageClassName" not in spec
    # both checkpoints in bf16 (4.3 GB and 17.5 GB) twice over, one revision beside the next
    assert quantity_bytes(spec["resources"]["requests"]["storage"]) >= 2 * (4.3 + 17.5) * 10**9
    check_model_cache(CLUSTER, MODEL_CACHE)
    # the head runs no engine: no checkpoint, no cache
    [head] = CLUSTER["headGroupSpec"]["template"]["spec"]["containers"]
    assert "/model-cache" not in mounted(CLUSTER["headGroupSpec"], head)


def _gpu_env(env, name):
    return next(e for e in env if e["name"] == name)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda env, pod: env.remove(_gpu_env(env, "HF_HOME")),
        lambda env, pod: _gpu_env(env, "HF_HOME").update(value="/root/.cache/hf"),
        lambda env, pod: env.remove(_gpu_env(env, "HF_HUB_OFFLINE")),  # would fetch from the hub
        lambda env, pod: _gpu_env(env, "HF_HUB_OFFLINE").update(value="0"),
        # the compile cache on the read-only claim, or on the root filesystem
        lambda env, pod: _gpu_env(env, "VLLM_CACHE_ROOT").update(value="/model-cache/vllm"),
        lambda env, pod: _gpu_env(env, "VLLM_CACHE_ROOT").update(value="/opt/vllm"),
        lambda env, pod: pod["volumes"][1]["persistentVolumeClaim"].update(claimName="other"),
        lambda env, pod: pod["volumes"][1]["persistentVolumeClaim"].pop("readOnly"),
        lambda env, pod: pod["containers"][0]["volumeMounts"][1].pop("readOnly"),
        lambda env, pod: pod["containers"][0]["volumeMounts"][1].update(readOnly=False),
    ],
)
def test_the_model_cache_check_fails_a_pod_that_may_write_the_claim_or_misses_it(breakage):
    cluster = copy.deepcopy(CLUSTER)
    pod = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert pod["volumes"][1]["name"] == "model-cache"
    assert pod["containers"][0]["volumeMounts"][1]["name"] == "model-cache"
    breakage(pod["containers"][0]["env"], pod)
    with pytest.raises(AssertionError):
        check_model_cache(cluster, MODEL_CACHE)


def test_the_head_may_not_write_the_model_cache_either():
    cluster = copy.deepcopy(CLUSTER)
    head = cluster["headGroupSpec"]["template"]["spec"]
    head["volumes"].append({"name": "model-cache", "persistentVolumeClaim": {"claimName": "mai-model-cache"}})
    with pytest.raises(AssertionError, match="head"):
        check_model_cache(cluster, MODEL_CACHE)


def _fill_container():
    [container] = FILL_JOB["spec"]["template"]["spec"]["containers"]
    return container


def _configured_sources() -> list[str]:
    source = yaml.safe_load((ROOT / "configs" / "mai.yaml").read_text())
    return [
        application["args"][role]["source"]
        for application in source["applications"]
        for role in ("small", "large")
    ]


def test_the_fill_job_downloads_each_configured_checkpoint_into_the_claim_the_pods_read():
    pod = FILL_JOB["spec"]["template"]["spec"]
    container = _fill_container()
    assert container["command"] == ["sh", "-ec"]
    [script] = container["args"]
    [models] = re.findall(r'^for model in (.+); do hf download "\$model"; done$', script)
    assert (
        models.split() == _configured_sources() == ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
    )
    # into the hub cache of the HF_HOME the GPU pods read: the same folder on the same claim, written
    # by the image's user (the GPU pods run as it), with the fill's own chunk cache off the claim
    env = env_values(container)
    for group in gpu_groups(CLUSTER).values():
        assert env["HF_HOME"] == env_values(group["template"]["spec"]["containers"][0])["HF_HOME"]
    mount, volume = mount_at(pod, container, env["HF_HOME"])
    assert mount["mountPath"] == env["HF_HOME"] and not mount.get("readOnly")
    assert volume["persistentVolumeClaim"] == {"claimName": MODEL_CACHE["metadata"]["name"]}
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["fsGroup"] == 100
    check_writable_paths(pod, container, "fill")
    assert mount_at(pod, container, env["HF_XET_CACHE"])[0]["mountPath"] == "/tmp"
    assert pod["restartPolicy"] == "Never" and FILL_JOB["spec"]["backoffLimit"] >= 1
    # the same image, so the same huggingface_hub, installed from hashed files
    assert container["image"] == CLUSTER["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]


def _containers_of(pod):
    return pod.get("initContainers", []) + pod["containers"]


def test_hf_token_is_only_in_the_container_that_downloads_the_checkpoints():
    holders = []
    for where, pod in manifest_pods().items():
        for container in _containers_of(pod):
            names = {item["name"] for item in container.get("env", [])}
            sources = [item.get("secretRef", {}).get("name") for item in container.get("envFrom", [])]
            if "HF_TOKEN" in names or "hf-token" in sources:
                holders.append(f"{where} {container['name']}")
    for document in manifest_documents().values():  # the autoscaler's container, which KubeRay adds
        if document["kind"] in ("RayService", "RayJob"):
            cluster = document["spec"].get("rayClusterConfig") or document["spec"]["rayClusterSpec"]
            options = cluster.get("autoscalerOptions") or {}
            assert "HF_TOKEN" not in {item["name"] for item in options.get("env", [])}
            assert not options.get("envFrom")
    assert holders == ["model-cache.yaml Job/mai-model-cache-fill job fill"]
    token = next(item for item in _fill_container()["env"] if item["name"] == "HF_TOKEN")
    # the checkpoints are public: the Job runs without the hf-token Secret (HF_TOKEN unset then)
    assert token["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}


def test_only_the_fill_job_can_write_the_model_cache():
    claim = MODEL_CACHE["metadata"]["name"]
    writers, readers = [], []
    for where, pod in manifest_pods().items():
        volumes = {
            volume["name"]: volume["persistentVolumeClaim"]
            for volume in pod.get("volumes", [])
            if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim
        }
        for container in _containers_of(pod):
            for mount in container.get("volumeMounts", []):
                if mount["name"] in volumes:
                    read_only = (
                        mount.get("readOnly") is True and volumes[mount["name"]].get("readOnly") is True
                    )
                    (readers if read_only else writers).append(f"{where} {container['name']}")
    assert writers == ["model-cache.yaml Job/mai-model-cache-fill job fill"]
    # every GPU pod of the RayService and of the RayJob reads it
    assert len(readers) == 4 and all("gpu" in reader for reader in readers), readers


def test_no_pod_of_any_manifest_mounts_a_kubernetes_api_token_but_the_autoscaler():
    pods = manifest_pods()
    # the RayService's and the RayJob's head and GPU groups, the RayJob's submitter, the fill Job, the
    # data pod: a new manifest's pods are checked as they come
    assert len(pods) == 3 + 4 + 1 + 1, sorted(pods)
    for where, pod in pods.items():
        check_no_api_token(pod, where)
    check_api_tokens(CLUSTER)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c["workerGroupSpecs"][1]["template"]["spec"].pop("automountServiceAccountToken"),
        lambda c: c["headGroupSpec"]["template"]["spec"].update(automountServiceAccountToken=True),
        lambda c: _head_pod(c)["containers"][0][
            "volumeMounts"
        ].append(  # the Ray container, beside the ingress
            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ),
        lambda c: c["autoscalerOptions"]["volumeMounts"].pop(),  # the autoscaler could not scale
        lambda c: c["autoscalerOptions"]["volumeMounts"][-1].pop("readOnly"),
    ],
)
def test_the_api_token_check_fails_a_pod_with_a_token_it_does_not_need(breakage):
    cluster = copy.deepcopy(CLUSTER)
    breakage(cluster)
    with pytest.raises((AssertionError, ValueError)):
        check_api_tokens(cluster)


def test_every_container_of_any_manifest_has_a_read_only_root_filesystem():
    for where, pod in manifest_pods().items():
        for container in _containers_of(pod):
            check_container_security(pod, container, f"{where} {container['name']}")
    check_pod_security(CLUSTER)  # and the autoscaler's


def test_every_ray_container_writes_only_to_emptydirs_and_its_caches_are_there():
    check_writable(CLUSTER)
    for group in [CLUSTER["headGroupSpec"], *GROUPS.values()]:
        [container] = group["template"]["spec"]["containers"]
        env = env_values(container)
        # torch's kernels folder (ray.serve.llm makes it on every node), FlashInfer's JIT cache and
        # Hugging Face's default cache are under ~/.cache; Triton's and CUDA's caches, and vLLM's usage
        # file (XDG_CONFIG_HOME), are moved there
        assert env["XDG_CACHE_HOME"] == "/home/ray/.cache"
        assert env["TRITON_HOME"].startswith("/home/ray/.cache") and env["CUDA_CACHE_PATH"].startswith(
            "/home/ray"
        )


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: _head_pod(c)["containers"][0]["volumeMounts"].pop(1),  # no /tmp
        lambda c: c["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["volumeMounts"].pop(3),
        lambda c: next(
            e
            for e in c["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["env"]
            if e["name"] == "TRITON_HOME"
        ).update(value="/home/ray"),  # ~/.triton on the read-only root filesystem
        lambda c: _head_pod(c)["containers"][0]["env"].pop(),  # no CUDA_CACHE_PATH
        # the pod's /tmp no emptyDir (the node's, say)
        lambda c: _head_pod(c)["volumes"][1].pop("emptyDir"),
        # the autoscaler's logs apart from the head's
        lambda c: c["autoscalerOptions"]["volumeMounts"].pop(1),
        lambda c: c["autoscalerOptions"]["volumeMounts"].pop(0),  # the autoscaler without /tmp
    ],
)
def test_the_writable_check_fails_a_container_that_would_write_its_root_filesystem(breakage):
    cluster = copy.deepcopy(CLUSTER)
    breakage(cluster)
    with pytest.raises(AssertionError):
        check_writable(cluster)


def test_the_other_manifests_pods_validate_against_kuberays_pod_template_schema():
    # the Job's and the data pod's fields are Kubernetes' own, spelt as the API server keeps them
    jsonschema.validate(FILL_JOB["spec"]["template"], pod_template_schema())
    data = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "k8s" / "batch-data.yaml").read_text())}
    jsonschema.validate(
        {"metadata": data["Pod"]["metadata"], "spec": data["Pod"]["spec"]}, pod_template_schema()
    )
    broken = copy.deepcopy(FILL_JOB["spec"]["template"])
    broken["spec"]["automountServiceAcountToken"] = False  # misspelt: the token would be mounted
    with pytest.raises(jsonschema.ValidationError, match="Additional properties are not allowed"):
        jsonschema.validate(broken, pod_template_schema())


def test_the_manifest_has_no_field_the_api_server_would_drop():
    # a misplaced field (authOptions under spec, a misspelt securityContext key) validates against the
    # CRD as it is, since its objects admit unknown fields; the API server drops them without a word
    jsonschema.validate(MANIFEST, strict_crd_schema(CRD))


@pytest.mark.parametrize(
    "mutation",
    [
        lambda m: m["spec"].update(authOptions=m["spec"]["rayClusterConfig"].pop("authOptions")),
        lambda m: m["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0][
            "securityContext"
        ].update(allowPrivilegeEscalaton=False),
    ],
)
def test_the_strict_schema_check_catches_a_field_the_api_server_would_drop(mutation):
    broken = copy.deepcopy(MANIFEST)
    mutation(broken)
    jsonschema.validate(broken, schema())  # the CRD's own schema lets it through
    with pytest.raises(jsonschema.ValidationError, match="Additional properties are not allowed"):
        jsonschema.validate(broken, strict_crd_schema(CRD))


# What `python k8s/render.py --otlp-endpoint URL --trace-ratio 0.05` gives every Ray container.
COLLECTOR = "http://otel-collector.observability:4318"
TRACING_VARIABLES = {
    "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": "serve_app.telemetry.exporter:span_processors",
    "RAY_SERVE_TRACING_SAMPLING_RATIO": "0.05",
    "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "serve_app.telemetry.proxy:middlewares",
    "OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR,
}


def _containers(cluster: dict) -> dict[str, dict]:
    """Every container of the head's pod and of each worker group's, by "group container"."""
    return {
        f"{name} {container['name']}": container
        for name, group in pod_groups(cluster).items()
        for container in group["template"]["spec"]["containers"]
    }


def _without_tracing(manifest: dict) -> dict:
    stripped = copy.deepcopy(manifest)
    cluster = stripped["spec"].get("rayClusterConfig") or stripped["spec"]["rayClusterSpec"]
    for container in _containers(cluster).values():
        container["env"] = [item for item in container["env"] if item["name"] not in TRACING_VARIABLES]
    return stripped


def test_the_tracing_option_puts_its_variables_on_every_ray_pod_of_both_manifests(capsys):
    from serve_app.telemetry.settings import check_tracing

    tracing = render.Tracing(COLLECTOR, 0.05)
    service = yaml.safe_load(render.render_text(tracing))
    documents = list(yaml.safe_load_all(render.rayjob_text(tracing)))
    [job] = [d for d in documents if d["kind"] == "RayJob"]
    jsonschema.validate(service, strict_crd_schema(CRD))
    jsonschema.validate(job, strict_crd_schema("ray.io_rayjobs.yaml"))
    for cluster in (service["spec"]["rayClusterConfig"], job["spec"]["rayClusterSpec"]):
        containers = _containers(cluster)
        assert set(containers) == {"head ray-head", "small-gpu ray-worker", "large-gpu ray-worker"}
        for where, container in containers.items():
            env = env_values(container)
            assert {name: env.get(name) for name in TRACING_VARIABLES} == TRACING_VARIABLES, where
            assert len(env) == len(container["env"]), where  # each variable once
    # what the application checks as it starts passes: tracing on, the proxy's guard, the collector
    engines = check_tracing(TRACING_VARIABLES)
    assert engines is not None and engines.endpoint == f"{COLLECTOR}/v1/traces"
    # nothing else changes: without the variables, the manifests are the committed ones
    committed_job = next(
        d for d in yaml.safe_load_all((ROOT / "k8s" / "rayjob.yaml").read_text()) if d["kind"] == "RayJob"
    )
    assert _without_tracing(service) == MANIFEST and _without_tracing(job) == committed_job
    # without the option no pod traces
    for cluster in (CLUSTER, committed_job["spec"]["rayClusterSpec"]):
        for where, container in _containers(cluster).items():
            assert not set(env_values(container)) & set(TRACING_VARIABLES), where
    # an upgrade on a new cluster carries them too; the default ratio is Serve's, 0.01
    assert render.main(["--new-cluster", "--otlp-endpoint", COLLECTOR]) == 0
    upgrading = yaml.safe_load(capsys.readouterr().out)
    for container in _containers(upgrading["spec"]["rayClusterConfig"]).values():
        assert env_values(container)["RAY_SERVE_TRACING_SAMPLING_RATIO"] == "0.01"
    assert render.render_text(tracing).startswith(
        f"# GENERATED by `python k8s/render.py --otlp-endpoint {COLLECTOR} --trace-ratio 0.05` from"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--otlp-endpoint", "otel-collector:4318"],
            "--otlp-endpoint 'otel-collector:4318': not an http(s) URL",
        ),
        (
            ["--otlp-endpoint", COLLECTOR, "--trace-ratio", "2"],
            "--trace-ratio 2.0: a sampling ratio between 0 and 1",
        ),
        (["--trace-ratio", "0.5"], "--trace-ratio goes with --otlp-endpoint"),
    ],
)
def test_the_tracing_options_are_refused_before_anything_is_written(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        render.main(["--check", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def _api_keys_file() -> str:
    from serve_app.config import check_application

    security = check_application(SERVE["applications"][0]).security
    assert security.keys_file is None  # the application's one key file is the mounted Secret's
    assert security.api_keys_file is not None
    return security.api_keys_file


def test_every_pod_mounts_the_api_keys_secret_as_the_file_the_application_reads():
    # proxy_location EveryNode: every pod runs an HTTP proxy, and an ingress replica lands on any pod
    # with a CPU free, so every pod needs the keys
    assert SERVE["proxy_location"] == "EveryNode"
    assert _api_keys_file() == render.API_KEYS_FILE == "/etc/mai-api-keys/api-keys"
    check_api_keys(CLUSTER, _api_keys_file())


def _keys_volume(pod):
    return next(volume for volume in pod["volumes"] if volume["name"] == "api-keys")


def _keys_mount(pod):
    return next(mount for mount in pod["containers"][0]["volumeMounts"] if mount["name"] == "api-keys")


@pytest.mark.parametrize(
    "breakage",
    [
        lambda pod: pod["containers"][0]["volumeMounts"].remove(_keys_mount(pod)),
        lambda pod: _keys_volume(pod)["secret"].update(optional=True),  # the pod would start without it
        lambda pod: _keys_volume(pod)["secret"].update(secretName="hf-token"),
        lambda pod: _keys_volume(pod)["secret"].update(items=[{"key": "api-keys", "path": "keys"}]),
        lambda pod: _keys_mount(pod).pop("readOnly"),
        # the file alone, through a subPath: the kubelet never updates it
        lambda pod: _keys_mount(pod).update(mountPath="/etc/mai-api-keys/api-keys", subPath="api-keys"),
        lambda pod: _keys_mount(pod).update(mountPath="/etc/keys"),  # not where the application reads
        # the keys in a variable too, read once when the container starts
        lambda pod: pod["containers"][0]["env"].append(
            {
                "name": "MAI_API_KEYS",
                "valueFrom": {"secretKeyRef": {"name": "mai-api-keys", "key": "api-keys"}},
            }
        ),
        lambda pod: pod["containers"][0].update(envFrom=[{"secretRef": {"name": "mai-api-keys"}}]),
    ],
)
def test_the_api_keys_check_fails_a_pod_without_them_as_an_updated_file(breakage):
    cluster = copy.deepcopy(CLUSTER)
    breakage(cluster["workerGroupSpecs"][1]["template"]["spec"])
    with pytest.raises(AssertionError):
        check_api_keys(cluster, _api_keys_file())


def test_ray_token_authentication_is_on_with_the_token_of_its_secret():
    check_token_auth(CLUSTER)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c.pop("authOptions"),
        lambda c: c["authOptions"].update(mode="disabled"),
        lambda c: c["authOptions"].pop("mode"),  # KubeRay turns auth on for mode: token only
        lambda c: c["authOptions"].update(secretName="other"),
        lambda c: c.update(rayVersion="2.51.0"),
        lambda c: c["headGroupSpec"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "RAY_AUTH_MODE", "value": "disabled"}
        ),
    ],
)
def test_the_token_check_fails_a_cluster_without_it(breakage):
    cluster = copy.deepcopy(CLUSTER)
    breakage(cluster)
    with pytest.raises(AssertionError):
        check_token_auth(cluster)


def test_every_container_runs_as_the_images_user_without_privileges():
    check_pod_security(CLUSTER)
    dockerfile = (ROOT / "k8s" / "Dockerfile").read_text()
    user = re.findall(r"^USER (\S+)$", dockerfile, re.M)[-1]  # the image's user, the last USER line
    for group in [CLUSTER["headGroupSpec"], *GROUPS.values()]:
        context = group["template"]["spec"]["securityContext"]
        assert user == f"{context['runAsUser']}:{context['runAsGroup']}" == "1000:100"  # ray, users
    data = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "k8s" / "batch-data.yaml").read_text())}
    pod = data["Pod"]["spec"]
    for container in pod["containers"]:
        check_container_security(pod, container, "mai-batch-data")


def _head_pod(cluster):
    return cluster["headGroupSpec"]["template"]["spec"]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: _head_pod(c)["securityContext"].pop("runAsNonRoot"),
        lambda c: _head_pod(c)["securityContext"].update(runAsUser=0),
        lambda c: _head_pod(c)["securityContext"].pop("seccompProfile"),
        lambda c: _head_pod(c)["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda c: _head_pod(c)["containers"][0]["securityContext"].pop("capabilities"),
        lambda c: _head_pod(c)["containers"][0]["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
        lambda c: _head_pod(c)["containers"][0]["securityContext"].update(runAsUser=0),
        lambda c: c["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].pop("securityContext"),
        lambda c: c["workerGroupSpecs"][1]["template"]["spec"].update(
            initContainers=[{"name": "fetch", "image": "busybox:1.37"}]
        ),
        lambda c: c["autoscalerOptions"].pop("securityContext"),
        lambda c: _head_pod(c)["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
        lambda c: c["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["securityContext"].update(
            readOnlyRootFilesystem=False
        ),
        lambda c: c["autoscalerOptions"]["securityContext"].pop("readOnlyRootFilesystem"),
    ],
)
def test_the_security_check_fails_a_container_that_may_run_as_root_or_gain_privileges(breakage):
    cluster = copy.deepcopy(CLUSTER)
    breakage(cluster)
    with pytest.raises(AssertionError):
        check_pod_security(cluster)


def _policy_ports() -> tuple[int, int]:
    """Serve's port (the application's) and the dashboard's (the head container's port named so)."""
    [head] = CLUSTER["headGroupSpec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in head["ports"]}
    return SERVE["http_options"]["port"], ports["dashboard"]


def _dashboard_peers() -> list[dict]:
    """Who calls the dashboard's API: the KubeRay operator, in the namespace docs/kubernetes.md installs
    its Helm chart to (the chart labels its pod app.kubernetes.io/name: kuberay-operator), and the
    submitter pod of k8s/rayjob.yaml's RayJob (KubeRay labels it with the RayJob's kind and name)."""
    [namespace] = re.findall(
        r"helm install kuberay-operator kuberay/kuberay-operator --namespace (\S+)", K8S_DOCS
    )
    [job] = [
        d for d in yaml.safe_load_all((ROOT / "k8s" / "rayjob.yaml").read_text()) if d["kind"] == "RayJob"
    ]
    operator = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
    }
    submitter_labels = {
        "ray.io/originated-from-crd": "RayJob",
        "ray.io/originated-from-cr-name": job["metadata"]["name"],
    }
    return [operator, {"podSelector": {"matchLabels": submitter_labels}}]


def test_the_network_policy_admits_from_outside_the_ray_pods_only_serves_port():
    serve_port, dashboard_port = _policy_ports()
    assert (serve_port, dashboard_port) == (8000, 8265)
    check_network_policy(POLICY, serve_port, dashboard_port, _dashboard_peers())
    # the dashboard listens beyond its pod because the operator needs it, and only it and the
    # submitter reach it there
    assert CLUSTER["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"


def _rule(policy, port):
    return next(
        rule
        for rule in policy["spec"]["ingress"]
        if {"protocol": "TCP", "port": port} in rule.get("ports", [])
    )


@pytest.mark.parametrize(
    "breakage",
    [
        lambda p: _rule(p, 8000)["ports"].append({"protocol": "TCP", "port": 8265}),  # the dashboard to all
        lambda p: _rule(p, 8000)["ports"].append({"protocol": "TCP", "port": 6379}),  # GCS to all
        lambda p: _rule(p, 8000).pop("ports"),  # every port from anywhere
        lambda p: p["spec"]["ingress"][0].update(
            ports=[{"protocol": "TCP", "port": 6379}]
        ),  # Ray pods cut off
        lambda p: p["spec"]["ingress"].pop(0),
        lambda p: _rule(p, 8265)["from"][0].pop("podSelector"),  # every pod of the operator's namespace
        lambda p: _rule(p, 8265)["from"].append({"namespaceSelector": {}}),  # every pod anywhere
        lambda p: _rule(p, 8265)["from"][0]["namespaceSelector"]["matchLabels"].update(
            {"kubernetes.io/metadata.name": "default"}
        ),
        lambda p: p["spec"].update(podSelector={}),
        lambda p: p["spec"].update(policyTypes=["Egress"]),
        lambda p: p["spec"]["ingress"][0]["from"][0].update(podselector=RAY_PODS),  # misspelt: dropped
    ],
)
def test_the_network_policy_check_fails_a_policy_that_admits_more(breakage):
    policy = copy.deepcopy(POLICY)
    breakage(policy)
    with pytest.raises((AssertionError, jsonschema.ValidationError)):
        check_network_policy(policy, *_policy_ports(), _dashboard_peers())


def test_the_docs_create_the_secrets_the_pods_read_and_apply_the_policy():
    assert f"kubectl create secret generic {RAY_TOKEN_SECRET} --from-literal={RAY_TOKEN_KEY}=" in K8S_DOCS
    assert (
        f"kubectl create secret generic {API_KEYS_SECRET['name']} --from-literal={API_KEYS_SECRET['key']}="
        in K8S_DOCS
    )
    assert "kubectl apply -f k8s/networkpolicy.yaml" in K8S_DOCS
    assert "kubectl port-forward svc/mai-head-svc 8265:8265" in K8S_DOCS  # the dashboard's only way in
