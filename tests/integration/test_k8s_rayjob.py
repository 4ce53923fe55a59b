"""The KubeRay RayJob that runs mai-batch: rendered from its template, the RayService's and configs/mai.yaml
(no drift), valid against KubeRay's RayJob CRD schema, on the RayService's cluster (image, groups, pins,
resources, /dev/shm and the model cache read-only, Ray's token, non-root pods on read-only root
filesystems writing only to emptyDirs, no Kubernetes API token but the autoscaler's) with the batch
storage mounted and no API keys, its submitter as restricted as the Ray pods, and running the
``mai-batch`` console script on the RayService's pinned application."""

import copy
import inspect
import shlex
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml

from .kuberay import (
    ROOT,
    api_keys_references,
    check_api_tokens,
    check_container_security,
    check_model_cache,
    check_no_api_token,
    check_pod_security,
    check_shared_memory,
    check_token_auth,
    check_writable,
    check_writable_paths,
    crd_schema,
    load_render,
    strict_crd_schema,
)

CRD = "ray.io_rayjobs.yaml"  # vendored: KubeRay commit feeaf72, the RayService CRD's

render = load_render()
DOCUMENTS = list(yaml.safe_load_all((ROOT / "k8s" / "rayjob.yaml").read_text()))
[CONFIG_MAP] = [d for d in DOCUMENTS if d["kind"] == "ConfigMap"]
[JOB] = [d for d in DOCUMENTS if d["kind"] == "RayJob"]
JOB_CLUSTER = JOB["spec"]["rayClusterSpec"]
SERVICE = yaml.safe_load((ROOT / "k8s" / "rayservice.yaml").read_text())
SERVICE_CLUSTER = SERVICE["spec"]["rayClusterConfig"]
ENTRYPOINT = shlex.split(JOB["spec"]["entrypoint"])
STORAGE = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "k8s" / "batch-data.yaml").read_text())}


def pod_groups(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The head and each worker group, by name."""
    return {"head": cluster["headGroupSpec"]} | {g["groupName"]: g for g in cluster["workerGroupSpecs"]}


def mounts(group: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath -> the pod volume mounted there (the same in every container of the pod)."""
    pod = group["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    per_container = [
        {mount["mountPath"]: volumes[mount["name"]] for mount in container.get("volumeMounts", [])}
        for container in pod["containers"]
    ]
    assert all(m == per_container[0] for m in per_container), per_container
    return per_container[0]


def without_batch_changes(cluster: dict[str, Any]) -> dict[str, Any]:
    """The cluster without what a batch job changes: volumes (the API keys' among them), their mounts,
    the readiness probes."""
    stripped = copy.deepcopy(cluster)
    for group in pod_groups(stripped).values():
        pod = group["template"]["spec"]
        pod.pop("volumes", None)
        for container in pod["containers"]:
            container.pop("volumeMounts", None)
            container.pop("readinessProbe", None)
    return stripped


def test_the_committed_rayjob_is_what_the_sources_render():
    assert (ROOT / "k8s" / "rayjob.yaml").read_text() == render.rayjob_text(), (
        "k8s/rayjob.yaml drifted from its template, the RayService's or configs/mai.yaml: "
        "run `python k8s/render.py`"
    )


def test_render_check_passes_on_the_committed_manifests_and_names_a_stale_one(tmp_path, monkeypatch, capsys):
    assert render.main(["--check"]) == 0
    stale = tmp_path / "k8s" / "rayjob.yaml"
    stale.parent.mkdir()
    stale.write_text(render.rayjob_text().replace("backoffLimit: 2", "backoffLimit: 3"))
    monkeypatch.setattr(render, "ROOT", tmp_path)
    monkeypatch.setattr(render, "RENDERED", {stale: render.rayjob_text})
    assert render.main(["--check"]) == 1
    assert "k8s/rayjob.yaml is out of date" in capsys.readouterr().err


def test_rayjob_validates_against_the_rayjob_crd():
    jsonschema.validate(JOB, crd_schema(CRD))
    jsonschema.validate(JOB, strict_crd_schema(CRD))  # no field the API server would drop


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (
            lambda j: j["spec"]["rayClusterSpec"].pop("headGroupSpec"),
            "'headGroupSpec' is a required property",
        ),
        (lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][1].pop("groupName"), "'groupName' is a"),
        (lambda j: j["spec"].update(backoffLimit="2"), "'2' is not of type 'integer'"),
        (lambda j: j["spec"].update(shutdownAfterJobFinishes="yes"), "'yes' is not of type 'boolean'"),
    ],
)
def test_the_schema_check_catches_broken_rayjobs(mutation, message):
    broken = copy.deepcopy(JOB)
    mutation(broken)
    with pytest.raises(jsonschema.ValidationError, match=message):
        jsonschema.validate(broken, crd_schema(CRD))


def test_the_job_runs_on_the_rayservices_cluster():
    assert without_batch_changes(JOB_CLUSTER) == without_batch_changes(SERVICE_CLUSTER)
    job_groups, service_groups = pod_groups(JOB_CLUSTER), pod_groups(SERVICE_CLUSTER)
    assert job_groups.keys() == service_groups.keys()
    for name, group in job_groups.items():
        service = service_groups[name]
        assert group["rayStartParams"] == service["rayStartParams"]  # GPUs and the pins' resources
        job_pod, service_pod = group["template"]["spec"], service["template"]["spec"]
        assert job_pod.get("nodeSelector") == service_pod.get("nodeSelector")
        for job_container, service_container in zip(
            job_pod["containers"], service_pod["containers"], strict=True
        ):
            assert job_container["image"] == service_container["image"]
            assert job_container["resources"] == service_container["resources"]
    # the head takes no engine: each model lands on its own group's GPU node
    assert JOB_CLUSTER["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"


def test_the_batch_config_is_the_rayservices_pinned_application_without_the_api_keys():
    [key] = CONFIG_MAP["data"]
    batch_config = yaml.safe_load(CONFIG_MAP["data"][key])
    service_config = yaml.safe_load(SERVICE["spec"]["serveConfigV2"])
    # the RayService's ingress reads the keys its pods mount; a batch job has neither
    assert service_config == render.with_api_keys_file(batch_config)
    assert all("security" not in application["args"] for application in batch_config["applications"])
    source = yaml.safe_load((ROOT / "configs" / "mai.yaml").read_text())
    assert batch_config == render.pinned_serve_config(source)
    args = batch_config["applications"][0]["args"]
    groups = JOB_CLUSTER["workerGroupSpecs"]
    for role, resource in render.PINS.items():
        assert args[role]["source"] == source["applications"][0]["args"][role]["source"]
        [group] = [g for g in groups if resource in render.advertised_resources(g)]
        assert args[role]["pin_resources"] == {resource: 1} and args[role]["bundle"] == {"GPU": 1}
        [container] = group["template"]["spec"]["containers"]
        assert group["rayStartParams"]["num-gpus"] == "1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_entrypoint_is_the_mai_batch_console_script_on_the_mounted_config():
    from batch.cli import parser

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert ENTRYPOINT[0] == "mai-batch" and scripts["mai-batch"] == "batch.cli:main"
    args = parser().parse_args(ENTRYPOINT[1:])  # every flag is one mai-batch takes
    config = PurePosixPath(args.config)
    head_mounts = mounts(JOB_CLUSTER["headGroupSpec"])
    # mai-batch reads its config on the head (the job's driver): from the ConfigMap, under its key
    assert head_mounts[str(config.parent)] == {
        "name": "mai-batch-config",
        "configMap": {"name": CONFIG_MAP["metadata"]["name"]},
    }
    assert config.name in CONFIG_MAP["data"]
    assert (ROOT / "configs" / config.name).is_file()  # the GPU config the ConfigMap is rendered from


def test_every_pod_sees_the_input_and_output_on_the_shared_claim():
    claim = STORAGE["PersistentVolumeClaim"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]  # the head and the GPU workers, on their nodes
    from batch.cli import parser

    args = parser().parse_args(ENTRYPOINT[1:])
    data = PurePosixPath(render.DATA_MOUNT)
    for path in (PurePosixPath(args.input), PurePosixPath(str(args.output))):
        assert path.is_relative_to(data), path
    volume = {"name": "mai-batch-data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    for name, group in pod_groups(JOB_CLUSTER).items():
        assert mounts(group)[str(data)] == volume, name
    # the pod that `kubectl cp` copies through mounts the same claim at the same path
    access = {"template": STORAGE["Pod"]}
    assert mounts(access)[str(data)]["persistentVolumeClaim"] == volume["persistentVolumeClaim"]


def test_workers_have_no_readiness_probe_since_a_batch_job_serves_without_an_http_proxy():
    import batch.model_tier

    # the RayService's probe is on Serve's proxy; a batch job starts none, so it would never pass
    assert 'proxy_location="Disabled"' in inspect.getsource(batch.model_tier)
    assert all(
        "readinessProbe" in c
        for g in SERVICE_CLUSTER["workerGroupSpecs"]
        for c in g["template"]["spec"]["containers"]
    )
    for group in JOB_CLUSTER["workerGroupSpecs"]:
        assert all("readinessProbe" not in c for c in group["template"]["spec"]["containers"])


def test_the_job_frees_its_gpus_and_retries_a_failed_run():
    spec = JOB["spec"]
    assert spec["submissionMode"] == "K8sJobMode"
    # the cluster goes when the job ends, after ttlSecondsAfterFinished (it has no effect without)
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    assert spec["backoffLimit"] >= 1  # a retry resumes where the output stops


def test_rendering_the_rayjob_refuses_a_cluster_without_a_group_for_a_pin():
    documents = list(yaml.safe_load_all((ROOT / "k8s" / "rayjob.template.yaml").read_text()))
    service_template = yaml.safe_load((ROOT / "k8s" / "rayservice.template.yaml").read_text())
    del service_template["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    with pytest.raises(ValueError, match="no worker group advertises 'mai_small'"):
        render.render_rayjob(
            documents, service_template, yaml.safe_load((ROOT / "configs" / "mai.yaml").read_text())
        )


def test_the_batch_cluster_leaves_the_rayservices_template_alone():
    service_template = yaml.safe_load((ROOT / "k8s" / "rayservice.template.yaml").read_text())
    cluster = service_template["spec"]["rayClusterConfig"]
    before = copy.deepcopy(cluster)
    batch = render.batch_cluster(cluster, "mai-batch-config")
    assert cluster == before and batch != before


def test_the_jobs_pods_have_dev_shm_in_memory_and_the_gpu_pods_the_model_cache():
    check_shared_memory(JOB_CLUSTER)
    documents = yaml.safe_load_all((ROOT / "k8s" / "model-cache.yaml").read_text())
    [cache] = [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    check_model_cache(JOB_CLUSTER, cache)  # read-only, offline: the RayService's fill Job fills it
    # beside the batch data: the GPU pods mount both claims, each once
    for group in JOB_CLUSTER["workerGroupSpecs"]:
        claims = [
            volume["persistentVolumeClaim"]["claimName"]
            for volume in group["template"]["spec"]["volumes"]
            if "persistentVolumeClaim" in volume
        ]
        assert sorted(claims) == sorted(
            [cache["metadata"]["name"], STORAGE["PersistentVolumeClaim"]["metadata"]["name"]]
        )


def test_the_docs_apply_the_files_that_exist():
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    for name in ("k8s/batch-data.yaml", "k8s/rayjob.yaml", "k8s/model-cache.yaml", "k8s/networkpolicy.yaml"):
        assert f"kubectl apply -f {name}" in text and Path(ROOT / name).is_file()


def test_the_jobs_cluster_has_the_ray_token_non_root_pods_and_no_api_keys():
    check_token_auth(JOB_CLUSTER)
    check_pod_security(JOB_CLUSTER)
    check_writable(JOB_CLUSTER)  # read-only root filesystems; the job's /data is on its claim
    check_api_tokens(JOB_CLUSTER)  # no Kubernetes API token but the autoscaler's
    assert JOB_CLUSTER["authOptions"] == SERVICE_CLUSTER["authOptions"]
    # no ingress in a batch job: nothing reads the keys, and the job starts without their Secret
    for name, group in pod_groups(JOB_CLUSTER).items():
        assert api_keys_references(group["template"]["spec"]) == [], name
    assert api_keys_references(SERVICE_CLUSTER["headGroupSpec"]["template"]["spec"])


def test_the_submitter_runs_the_heads_image_as_restricted_as_the_ray_pods():
    submitter = JOB["spec"]["submitterPodTemplate"]
    pod = submitter["spec"]
    [container] = pod["containers"]
    head = SERVICE_CLUSTER["headGroupSpec"]["template"]["spec"]
    # KubeRay fills in the first container's command (`ray job submit ...`), address and token
    assert container["name"] == "ray-job-submitter" and "command" not in container
    assert container["image"] == head["containers"][0]["image"]
    assert pod["restartPolicy"] == "Never"  # a Kubernetes Job's pod; the Job retries, not the kubelet
    check_container_security(pod, container, "submitter")
    assert pod["securityContext"] == head["securityContext"]
    assert container["securityContext"] == head["containers"][0]["securityContext"]
    # `ray job submit` calls the dashboard with the Ray token, never the Kubernetes API; its root
    # filesystem read-only, it writes to its own /tmp and ~/.cache
    check_no_api_token(pod, "submitter")
    check_writable_paths(pod, container, "submitter")


@pytest.mark.parametrize(
    "breakage",
    [
        lambda pod: pod.pop("securityContext"),
        lambda pod: pod["containers"][0].pop("securityContext"),
        lambda pod: pod["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda pod: pod["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
    ],
)
def test_the_security_check_fails_a_submitter_that_may_run_as_root(breakage):
    pod = copy.deepcopy(JOB["spec"]["submitterPodTemplate"]["spec"])
    breakage(pod)
    with pytest.raises(AssertionError):
        check_container_security(pod, pod["containers"][0], "submitter")


def test_the_batch_cluster_drops_only_the_api_keys_volume_and_its_mounts():
    service_template = yaml.safe_load((ROOT / "k8s" / "rayservice.template.yaml").read_text())
    batch = render.batch_cluster(service_template["spec"]["rayClusterConfig"], "mai-batch-config")
    service_groups = pod_groups(service_template["spec"]["rayClusterConfig"])
    added = {"mai-batch-data", "mai-batch-config"}
    for name, group in pod_groups(batch).items():
        pod, service_pod = group["template"]["spec"], service_groups[name]["template"]["spec"]
        [container], [service_container] = pod["containers"], service_pod["containers"]
        assert container.get("env") == service_container.get("env"), name  # HF_HOME, the caches ... stay
        kept = [v for v in service_pod["volumes"] if v["name"] != render.API_KEYS_VOLUME]
        assert [v for v in pod["volumes"] if v["name"] not in added] == kept, name
        kept_mounts = [m for m in service_container["volumeMounts"] if m["name"] != render.API_KEYS_VOLUME]
        assert [m for m in container["volumeMounts"] if m["name"] not in added] == kept_mounts, name
        assert len(kept) < len(service_pod["volumes"]), f"{name}: the template has no API keys volume"


@pytest.mark.parametrize(
    "breakage",
    [
        lambda pod: pod.pop("automountServiceAccountToken"),
        lambda pod: pod["containers"][0]["volumeMounts"].pop(0),  # no /tmp
        lambda pod: pod["volumes"][1].update(emptyDir=None, persistentVolumeClaim={"claimName": "x"}),
    ],
)
def test_the_submitter_checks_fail_a_submitter_with_a_token_or_nowhere_to_write(breakage):
    pod = copy.deepcopy(JOB["spec"]["submitterPodTemplate"]["spec"])
    breakage(pod)
    with pytest.raises(AssertionError):
        check_no_api_token(pod, "submitter")
        check_writable_paths(pod, pod["containers"][0], "submitter")
