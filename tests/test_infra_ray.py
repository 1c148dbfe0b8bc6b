"""Static checks of infra/ (no Docker, no cluster), Ray: the KubeRay manifests are one cluster spec, Ray
nodes get the environment vidtx forwards, the `ray up` config validates against Ray's schema, and the Ray
job entrypoints are `vidtx` commands whose configs load. Sizing (`vidtx plan`) is tested in test_plan.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import typer.main
from infra_manifests import NAMES, ROOT, containers, doc, docs, env_names, env_value, image

from vidtx.cli import app
from vidtx.config import load_config
from vidtx.ray_session import WORKER_ENV_VARS


def cli_arguments(command: str) -> list[str]:
    """A `vidtx ...` command line with the image's checkout (/opt/vidtx) mapped onto this one."""
    return [arg.replace(NAMES["workdir"], str(ROOT), 1) for arg in shlex.split(command)]


def ray_entrypoints() -> list[str]:
    return [
        doc("ray/rayjob.yaml")["spec"]["entrypoint"],
        doc("ray/raycronjob.yaml")["spec"]["jobTemplate"]["entrypoint"],
    ]


# --- Ray: the cluster manifests agree with each other and with the code ----------------------------


def test_kuberay_clusters_are_one_cluster_spec() -> None:
    cluster = doc("ray/raycluster.yaml")
    assert cluster["metadata"]["name"] == NAMES["ray"]["cluster"]
    job_specs = [
        doc("ray/rayjob.yaml")["spec"]["rayClusterSpec"],
        doc("ray/raycronjob.yaml")["spec"]["jobTemplate"]["rayClusterSpec"],
    ]
    for spec in [cluster["spec"], *job_specs]:
        assert spec["authOptions"] == {"mode": "token", "secretName": NAMES["ray"]["auth-secret"]}
        (head,) = spec["headGroupSpec"]["template"]["spec"]["containers"]
        assert {p["containerPort"] for p in head["ports"]} == {
            NAMES["ray"]["gcs-port"],
            NAMES["ray"]["dashboard-port"],
        }
        (workers,) = spec["workerGroupSpecs"]
        (worker,) = workers["template"]["spec"]["containers"]
        assert (
            worker["resources"]["limits"]["nvidia.com/gpu"]
            == worker["resources"]["requests"]["nvidia.com/gpu"]
        )
    for spec in job_specs:  # the job clusters: raycluster.yaml without autoscaling
        assert spec["headGroupSpec"] == cluster["spec"]["headGroupSpec"]
        (job_workers,), (workers,) = spec["workerGroupSpecs"], cluster["spec"]["workerGroupSpecs"]
        assert {k: v for k, v in job_workers.items() if "eplicas" not in k} == {
            k: v for k, v in workers.items() if "eplicas" not in k
        }
        assert job_workers["replicas"] == job_workers["minReplicas"] == job_workers["maxReplicas"]
        assert "enableInTreeAutoscaling" not in spec


def test_ray_nodes_get_the_environment_vidtx_forwards() -> None:
    """Ray pods and `ray up` nodes set only variables that vidtx's launcher forwards to Ray workers (plus
    Ray's own auth mode, and on Kubernetes MLflow's login from the services' Secret: credentials come
    from each node's environment, never from a runtime env), and MLflow's address is the service's."""
    mlflow_uri = f"http://mlflow:{NAMES['services']['mlflow']}"
    mlflow_login = {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"}
    for path in ("ray/raycluster.yaml", "ray/rayjob.yaml", "ray/raycronjob.yaml"):
        for container in containers(docs(path)):
            assert env_names(container) <= set(WORKER_ENV_VARS) | mlflow_login
            assert mlflow_login <= env_names(container)
            assert env_value(container, "MLFLOW_TRACKING_URI") == mlflow_uri
    cluster = doc("ray/cluster.yaml")
    docker_env = dict(
        o.split()[1].split("=", 1) for o in cluster["docker"]["run_options"] if o.startswith("--env")
    )
    assert set(docker_env) <= {*WORKER_ENV_VARS, "RAY_AUTH_MODE"}
    assert "MLFLOW_TRACKING_URI" in docker_env


def test_ray_up_config_validates_against_rays_schema() -> None:
    cluster = doc("ray/cluster.yaml")
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(cluster, schema)
    assert cluster["docker"]["image"] == image("train")
    head_start = " ".join(cluster["head_start_ray_commands"])
    assert f"--port={NAMES['ray']['gcs-port']}" in head_start
    assert f"--dashboard-port={NAMES['ray']['dashboard-port']}" in head_start
    assert f"$RAY_HEAD_IP:{NAMES['ray']['gcs-port']}" in " ".join(cluster["worker_start_ray_commands"])


# --- entrypoints --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ray_entrypoints())
def test_ray_job_entrypoints_are_vidtx_commands_with_loadable_configs(command: str) -> None:
    program, name, *arguments = cli_arguments(command)
    assert program == "vidtx"
    group = typer.main.get_command(app)
    context = group.commands[name].make_context(name, arguments)  # options and the config file exist
    config = load_config(context.params["config"], context.params["overrides"] or [])
    assert config.train.use_gpu
    for path in (config.data.shards, Path(config.train.storage_path), config.workdir):
        assert any(path.is_relative_to(mount) for mount in NAMES["storage"]["mounts"]), path
