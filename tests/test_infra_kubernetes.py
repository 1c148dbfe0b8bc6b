"""Static checks of infra/ (no Docker, no cluster), Kubernetes: the objects share a namespace, secrets and
the shared volume (mounted at the same paths in every pod), and Prefect's Kubernetes work pool renders a
vidtx job whose flow runs reach the Ray head and MLflow with the demo config on the shared volume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from infra_manifests import (
    ENV_EXAMPLE,
    INFRA,
    NAMES,
    ROOT,
    assert_deployment_runs,
    doc,
    docs,
    image,
    load,
    pod_specs,
    walk,
)
from prefect.server.schemas.actions import WorkPoolCreate
from prefect.utilities.templating import apply_values

from vidtx.config import PipelineConfig, load_config
from vidtx.tracking.runs import resolve_tracking_uri


def kubernetes_objects() -> list[dict[str, Any]]:
    files = [
        *(INFRA / "k8s").glob("*.yaml"),
        *(INFRA / "ray").glob("ray*.yaml"),
        INFRA / "prefect/worker.yaml",
    ]
    return [d for path in files for d in load(path)]


def kubernetes_deployments() -> list[dict[str, Any]]:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return [d for d in spec["deployments"] if d["work_pool"]["name"] == NAMES["work-pools"]["kubernetes"]]


# --- Kubernetes: namespace, secrets, shared volume ----------------------------------------------------


def test_kubernetes_objects_share_namespace_secrets_and_volume() -> None:
    objects = kubernetes_objects()
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == NAMES["namespace"], obj["metadata"]["name"]
    secret_keys = set()
    for key, value in walk(objects):
        if key == "secretKeyRef" and value["name"] == NAMES["secrets"]:
            secret_keys.add(value["key"])
        elif key == "secretKeyRef":
            assert (value["name"], value["key"]) == (NAMES["ray"]["auth-secret"], "auth_token")
        elif key == "volumeMounts":
            scripts = [m["subPath"] for m in value if m["name"] == "scripts"]
            assert all(list((INFRA / "docker").rglob(script)) for script in scripts), scripts
    passwords = {k for k in ENV_EXAMPLE if k.endswith(("PASSWORD", "SECRET_KEY"))}
    assert passwords <= secret_keys <= set(ENV_EXAMPLE)  # the same env file serves compose and Kubernetes
    claims = [d for d in docs("k8s/storage.yaml") if d["kind"] == "PersistentVolumeClaim"]
    assert [(c["metadata"]["name"], c["spec"]["accessModes"]) for c in claims] == [
        (NAMES["storage"]["claim"], ["ReadWriteMany"])
    ]


def shared_mounts(pod_spec: dict[str, Any]) -> list[dict[str, str]]:
    """{mount path: sub-path} of every container of `pod_spec` that mounts the shared claim."""
    volumes = {
        v["name"]
        for v in pod_spec.get("volumes", [])
        if v.get("persistentVolumeClaim", {}).get("claimName") == NAMES["storage"]["claim"]
    }
    return [
        {m["mountPath"]: m.get("subPath", "") for m in c.get("volumeMounts", []) if m["name"] in volumes}
        for c in pod_spec["containers"]
    ]


def test_every_pod_sees_the_shared_volume_at_the_same_paths() -> None:
    template = doc("prefect/kubernetes.json")["job_configuration"]["job_manifest"]
    mounting = [("kubernetes.json", template)] + [(o["metadata"]["name"], o) for o in kubernetes_objects()]
    for name, obj in mounting:
        for spec in pod_specs(obj):
            for mounts in shared_mounts(spec):
                if name == "vidtx-shared-init":  # mounts the volume's root to create the sub-folders
                    command = " ".join(spec["containers"][0]["command"])
                    assert all(f"/volume/{sub}" in command for sub in NAMES["storage"]["mounts"].values())
                elif mounts:
                    assert mounts == NAMES["storage"]["mounts"], name
    ray_pods = [
        spec
        for path in ("ray/raycluster.yaml", "ray/rayjob.yaml", "ray/raycronjob.yaml")
        for spec in pod_specs(docs(path))
    ]
    assert len(ray_pods) == 6
    assert all(shared_mounts(spec) == [NAMES["storage"]["mounts"]] for spec in ray_pods)
    assert shared_mounts(pod_specs(template)[0]) == [NAMES["storage"]["mounts"]]

    cluster = doc("ray/cluster.yaml")
    volumes = [
        option.split()[1] for option in cluster["docker"]["run_options"] if option.startswith("--volume")
    ]
    assert {v.split(":")[1]: v.split(":")[0].rsplit("/", 1)[1] for v in volumes} == NAMES["storage"]["mounts"]


# --- the Kubernetes work pool --------------------------------------------------------------------------


def test_kubernetes_work_pool_template_renders_a_vidtx_job() -> None:
    template = doc("prefect/kubernetes.json")
    WorkPoolCreate(name=NAMES["work-pools"]["kubernetes"], type="kubernetes", base_job_template=template)
    variables = template["variables"]["properties"]
    for deployment in kubernetes_deployments():
        assert set(deployment["work_pool"]["job_variables"]) <= set(variables)
    defaults = {name: spec.get("default") for name, spec in variables.items()}
    job = apply_values(template["job_configuration"], defaults | {"command": "prefect flow-run execute"})
    manifest = job["job_manifest"]
    assert job["namespace"] == manifest["metadata"]["namespace"] == NAMES["namespace"]
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "prefect-job"  # the Kubernetes worker fills in this container
    assert container["image"] == image("train")
    logins = {  # Ray Jobs API token, Prefect API auth string, MLflow basic auth: from the Secrets
        "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "PREFECT_ADMIN_PASSWORD", "PREFECT_API_AUTH_STRING",
        "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
    }  # fmt: skip
    assert {e["name"] for e in container["env"]} == logins
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert {ref["name"] for name, ref in secrets.items() if name != "RAY_AUTH_TOKEN"} == {NAMES["secrets"]}


def test_prefect_flow_runs_reach_the_ray_head_and_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    head = f"http://{NAMES['ray']['cluster']}-head-svc:{NAMES['ray']['dashboard-port']}"
    mlflow_uri = f"http://mlflow:{NAMES['services']['mlflow']}"
    for deployment in kubernetes_deployments():
        job_variables = deployment["work_pool"]["job_variables"]
        assert job_variables["env"] == {"MLFLOW_TRACKING_URI": mlflow_uri, "RAY_ADDRESS": head}
        assert job_variables["image"] == "{{ $VIDTX_IMAGE }}"
        assert deployment["pull"] == [
            {"prefect.deployments.steps.set_working_directory": {"directory": NAMES["workdir"]}}
        ]
    # ... and the code reads both: MLFLOW_TRACKING_URI wins over the config, RAY_ADDRESS picks the cluster.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    assert resolve_tracking_uri(PipelineConfig()) == mlflow_uri
    assert 'os.environ.get("RAY_ADDRESS")' in (ROOT / "vidtx/stages/train.py").read_text()
    assert f"WORKDIR {NAMES['workdir']}" in (INFRA / "docker/train.Dockerfile").read_text()


def test_cluster_demo_is_the_demo_config_on_the_shared_volume() -> None:
    overrides = [
        "workdir=/mnt/shared/demo",
        "synth.output=/datasets/synthetic",
        "shard.source=/datasets/synthetic/annotations.csv",
        "shard.output=/datasets/synthetic-shards",
        "data.shards=/datasets/synthetic-shards",
        "train.storage_path=/mnt/shared/ray",
        "train.use_gpu=true",
        "train.precision=bf16",
        f"tracking.ui_url=http://127.0.0.1:{NAMES['services']['mlflow']}",
    ]
    expected = load_config(ROOT / "configs/experiments/demo.yaml", overrides)
    searched = load_config(ROOT / "configs/experiments/demo_sweep.yaml", overrides)  # the local sweep's
    pretrained = load_config(ROOT / "configs/experiments/demo_pretrain.yaml", overrides)
    for deployment in kubernetes_deployments():
        assert_deployment_runs(
            deployment,
            {"sweep_model": searched, "pretrain_model": pretrained}.get(
                deployment["entrypoint"].split(":")[1], expected
            ),
        )
    for path in (
        expected.workdir,
        expected.synth.output,
        expected.shard.output,
        Path(expected.train.storage_path),
    ):
        assert any(path.is_relative_to(mount) for mount in NAMES["storage"]["mounts"]), path
