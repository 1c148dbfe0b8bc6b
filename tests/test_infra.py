"""Static checks of the cluster infrastructure in infra/ (nothing here needs Docker or a cluster).

Every manifest parses and validates where the tools vidtx installs ship a check (Ray's cluster-config
schema, Prefect's work-pool validation); images, ports, service addresses, volumes, secrets and
environment variable names agree with infra/names.yaml, prefect.yaml and the code; the commands the
manifests run exist in the `vidtx` CLI and their configs load. The sizing script is tested last.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import mlflow.cli
import mlflow.environment_variables
import pytest
import ray.autoscaler
import typer.main
import yaml
from prefect.server.schemas.actions import WorkPoolCreate
from prefect.settings import Settings
from prefect.utilities.templating import apply_values
from typer.testing import CliRunner

from vidtx.cli import app
from vidtx.config import PipelineConfig, ShardConfig, SynthConfig, load_config
from vidtx.tracking.runs import resolve_tracking_uri
from vidtx.train.launcher import WORKER_ENV_VARS

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"
NAMES = yaml.safe_load((INFRA / "names.yaml").read_text())
MANIFESTS = sorted(p for p in INFRA.rglob("*") if p.suffix in {".yaml", ".yml", ".json"})


# --- helpers --------------------------------------------------------------------------------------


def load(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    return [json.loads(text)] if path.suffix == ".json" else [d for d in yaml.safe_load_all(text) if d]


def docs(relative: str) -> list[dict[str, Any]]:
    return load(INFRA / relative)


def doc(relative: str) -> dict[str, Any]:
    (only,) = docs(relative)
    return only


def walk(node: Any) -> Iterator[tuple[str | int | None, Any]]:
    """(key, value) for every value of a nested structure; key None for the root."""
    stack: list[tuple[str | int | None, Any]] = [(None, node)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend(enumerate(value))


def pod_specs(node: Any) -> list[dict[str, Any]]:
    """Every Kubernetes pod spec (a mapping with `containers`) inside `node`."""
    return [v for _, v in walk(node) if isinstance(v, dict) and isinstance(v.get("containers"), list)]


def containers(node: Any) -> list[dict[str, Any]]:
    return [c for spec in pod_specs(node) for c in spec["containers"]]


def kubernetes_objects() -> list[dict[str, Any]]:
    files = [
        *(INFRA / "k8s").glob("*.yaml"),
        *(INFRA / "ray").glob("ray*.yaml"),
        INFRA / "prefect/worker.yaml",
    ]
    return [d for path in files for d in load(path)]


def image(name: str) -> str:
    return f"{NAMES['registry']}/{NAMES['images'][name]}:{NAMES['version']}"


def constraint(package: str) -> str:
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split() if "==" in line)
    return pins[package].split("+")[0]


def env_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )
    return dict(pairs)


ENV_EXAMPLE = env_file(INFRA / "docker/env.example")
COMPOSE = doc("docker/compose.yaml")
COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def compose_value(text: str) -> str:
    """Interpolate like `docker compose` with env.example as the .env file."""

    def value(match: re.Match[str]) -> str:
        name, kind, default = match.groups()
        return ENV_EXAMPLE.get(name, default if kind == "-" else "")

    return COMPOSE_VARIABLE.sub(value, text)


def env_names(container: dict[str, Any]) -> set[str]:
    env = container.get("env") or container.get("environment") or []
    return set(env) if isinstance(env, dict) else {entry["name"] for entry in env}


def env_value(container: dict[str, Any], name: str) -> str:
    env = container.get("env") or container.get("environment") or []
    if isinstance(env, dict):
        return compose_value(str(env[name]))
    return next(entry["value"] for entry in env if entry["name"] == name)


def cli_arguments(command: str) -> list[str]:
    """A `vidtx ...` command line with the image's checkout (/opt/vidtx) mapped onto this one."""
    return [arg.replace(NAMES["workdir"], str(ROOT), 1) for arg in shlex.split(command)]


def ray_entrypoints() -> list[str]:
    return [
        doc("ray/rayjob.yaml")["spec"]["entrypoint"],
        doc("ray/raycronjob.yaml")["spec"]["jobTemplate"]["entrypoint"],
    ]


def kubernetes_deployments() -> list[dict[str, Any]]:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return [d for d in spec["deployments"] if d["work_pool"]["name"] == NAMES["work-pools"]["kubernetes"]]


# --- parsing, versions, images ----------------------------------------------------------------------


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_manifest_parses_into_mappings(path: Path) -> None:
    loaded = load(path)
    assert loaded
    assert all(isinstance(d, dict) and d for d in loaded)


def test_images_are_the_named_ones_at_the_project_version() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert NAMES["version"] == pyproject["project"]["version"]
    dockerfiles = {p.name.removesuffix(".Dockerfile") for p in (INFRA / "docker").glob("*.Dockerfile")}
    assert dockerfiles == {name.removeprefix("vidtx-") for name in NAMES["images"].values()}

    allowed = {image(name) for name in NAMES["images"]} | set(NAMES["upstream-images"].values())
    used: dict[str, set[str]] = {}
    for path in MANIFESTS:
        for key, value in walk(load(path)):
            if key == "image" and isinstance(value, str) and "{{" not in value:
                used.setdefault(compose_value(value), set()).add(path.name)
    template_image = doc("prefect/kubernetes.json")["variables"]["properties"]["image"]["default"]
    used.setdefault(template_image, set()).add("kubernetes.json")
    assert set(used) <= allowed, f"unknown images: {set(used) - allowed}"
    assert {"raycluster.yaml", "rayjob.yaml", "raycronjob.yaml", "cluster.yaml", "kubernetes.json"} <= used[
        image("train")
    ]
    assert "worker.yaml" in used[image("prefect-worker")]
    assert {"compose.yaml", "services.yaml"} <= used[image("mlflow")]
    for dockerfile in (INFRA / "docker").glob("*.Dockerfile"):
        tag = image(f"{dockerfile.name.removesuffix('.Dockerfile')}")
        assert f"-t {tag} ." in dockerfile.read_text(), f"{dockerfile.name}: build command with {tag}"


def test_upstream_versions_follow_the_constraints() -> None:
    assert (
        NAMES["upstream-images"]["prefect-server"] == f"prefecthq/prefect:{constraint('prefect')}-python3.11"
    )
    ray_versions = {
        v
        for k, v in walk([docs("ray/raycluster.yaml"), docs("ray/rayjob.yaml"), docs("ray/raycronjob.yaml")])
        if k == "rayVersion"
    }
    assert ray_versions == {constraint("ray")}
    for dockerfile in (INFRA / "docker").glob("*.Dockerfile"):
        assert "constraints.txt" in dockerfile.read_text(), f"{dockerfile.name} installs unpinned packages"


# --- services: ports, addresses, secrets, exposure --------------------------------------------------


URL = re.compile(r"\b(?:https?|postgresql(?:\+asyncpg)?)://(?:[^@/\s]*@)?([\w.-]+):(\d+)")


def test_service_addresses_use_the_named_ports() -> None:
    ports = {**NAMES["services"], f"{NAMES['ray']['cluster']}-head-svc": NAMES["ray"]["dashboard-port"]}
    texts = [p.read_text() for p in INFRA.rglob("*") if p.is_file() and "local" not in p.parts]
    addresses = [
        m.groups() for text in [*texts, (ROOT / "prefect.yaml").read_text()] for m in URL.finditer(text)
    ]
    checked = [(host, int(port)) for host, port in addresses if host in ports]
    assert {host for host, _ in checked} == set(ports), "every service is addressed somewhere"
    assert all(port == ports[host] for host, port in checked), checked

    kubernetes_services = {
        d["metadata"]["name"]: d for d in docs("k8s/services.yaml") if d["kind"] == "Service"
    }
    assert set(kubernetes_services) == set(NAMES["services"])
    for name, port in NAMES["services"].items():
        assert kubernetes_services[name]["spec"]["ports"][0]["port"] == port
        assert name in COMPOSE["services"]


def test_local_and_cluster_uis_share_ports() -> None:
    """`make ui` (infra/local) and the port-forwarded cluster services open the same browser URLs."""
    from flows.links import DEFAULT_MLFLOW_UI

    ui_script = (INFRA / "local/ui.sh").read_text()
    assert f"PREFECT_PORT=${{PREFECT_PORT:-{NAMES['services']['prefect-server']}}}" in ui_script
    assert f"MLFLOW_PORT=${{MLFLOW_PORT:-{NAMES['services']['mlflow']}}}" in ui_script
    assert f"http://127.0.0.1:{NAMES['services']['mlflow']}" == DEFAULT_MLFLOW_UI
    prefect_ui_api = f"http://127.0.0.1:{NAMES['services']['prefect-server']}/api"
    assert ENV_EXAMPLE["PREFECT_SERVER_UI_API_URL"] == prefect_ui_api
    server = next(
        d
        for d in docs("k8s/services.yaml")
        if d["metadata"]["name"] == "prefect-server" and d["kind"] == "Deployment"
    )
    assert env_value(containers(server)[0], "PREFECT_SERVER_UI_API_URL") == prefect_ui_api


def test_compose_publishes_on_localhost_and_keeps_secrets_in_the_env_file() -> None:
    services = COMPOSE["services"]
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert set(published) == {"mlflow", "prefect-server"}
    for name, ports in published.items():
        port = NAMES["services"][name]
        assert ports == [f"${{VIDTX_BIND_ADDRESS:-127.0.0.1}}:{port}:{port}"]
    assert ENV_EXAMPLE["VIDTX_BIND_ADDRESS"] == "127.0.0.1"

    text = (INFRA / "docker/compose.yaml").read_text()
    for name, kind, _ in COMPOSE_VARIABLE.findall(text):
        assert name in ENV_EXAMPLE or kind == "-", f"${{{name}}} is neither in env.example nor defaulted"
    secrets = {k for k in ENV_EXAMPLE if k.endswith(("PASSWORD", "SECRET_KEY"))}
    assert secrets
    assert all(ENV_EXAMPLE[k].startswith("change-me") for k in secrets)
    assert not any(value in text for key, value in ENV_EXAMPLE.items() if key in secrets)
    ignored = subprocess.run(["git", "check-ignore", "-q", "infra/docker/.env"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, "infra/docker/.env must be ignored by git"

    one_shot = {name for name, s in services.items() if "restart" not in s}
    assert one_shot == {"minio-setup"}
    for name, service in services.items():
        assert name in one_shot or "healthcheck" in service, f"{name} has no health check"
        for dependency in service.get("depends_on", {}):
            assert dependency in services
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (INFRA / "docker" / source).is_file(), volume
            else:
                assert source in COMPOSE["volumes"], volume
        if "build" in service:
            assert (INFRA / "docker" / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    for database in NAMES["databases"]:
        assert f"create_database {database} " in (INFRA / "docker/postgres/init-databases.sh").read_text()
    assert services["minio-setup"]["environment"]["BUCKET"] == NAMES["mlflow-bucket"]


def test_service_settings_are_known_to_prefect_and_mlflow() -> None:
    """Misspelt settings are ignored silently by both servers, so every name is checked against them."""
    prefect_settings = set(Settings().to_environment_variables(exclude_unset=False))
    mlflow_settings = {p.envvar for p in mlflow.cli.server.params if isinstance(p.envvar, str)} | {
        v.name
        for v in vars(mlflow.environment_variables).values()
        if isinstance(getattr(v, "name", None), str)
    }
    server_containers = {
        "prefect-server": [COMPOSE["services"]["prefect-server"]],
        "mlflow": [COMPOSE["services"]["mlflow"]],
    }
    for d in docs("k8s/services.yaml"):
        if d["kind"] == "Deployment":
            server_containers[d["metadata"]["name"]] += containers(d)
    for container in server_containers["prefect-server"]:
        names = {n for n in env_names(container) if n.startswith("PREFECT_")} - set(ENV_EXAMPLE)
        assert names
        assert names <= prefect_settings, names - prefect_settings
    for container in server_containers["mlflow"]:
        names = {n for n in env_names(container) if n.startswith("MLFLOW_")} - set(ENV_EXAMPLE)
        assert names
        assert names <= mlflow_settings, names - mlflow_settings
        assert "mlflow:*" in env_value(container, "MLFLOW_SERVER_ALLOWED_HOSTS").split(",")
        assert env_value(container, "MLFLOW_ARTIFACTS_DESTINATION") == f"s3://{NAMES['mlflow-bucket']}"


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


# --- Ray: the cluster manifests agree with each other, with Prefect and with the code ----------------


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
    Ray's own auth mode), and MLflow's address is the service's."""
    mlflow_uri = f"http://mlflow:{NAMES['services']['mlflow']}"
    for path in ("ray/raycluster.yaml", "ray/rayjob.yaml", "ray/raycronjob.yaml"):
        for container in containers(docs(path)):
            assert env_names(container) <= set(WORKER_ENV_VARS)
            assert env_value(container, "MLFLOW_TRACKING_URI") == mlflow_uri
    cluster = doc("ray/cluster.yaml")
    docker_env = dict(
        o.split()[1].split("=", 1) for o in cluster["docker"]["run_options"] if o.startswith("--env")
    )
    assert set(docker_env) <= {*WORKER_ENV_VARS, "RAY_AUTH_MODE"}
    assert "MLFLOW_TRACKING_URI" in docker_env


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
    assert 'os.environ.get("RAY_ADDRESS")' in (ROOT / "vidtx/train/launcher.py").read_text()
    assert f"WORKDIR {NAMES['workdir']}" in (INFRA / "docker/train.Dockerfile").read_text()


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


def test_images_and_workers_start_what_exists() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert 'CMD ["vidtx", "--help"]' in (INFRA / "docker/train.Dockerfile").read_text()
    pool = NAMES["work-pools"]["kubernetes"]
    worker_start = [
        "prefect",
        "worker",
        "start",
        "--pool",
        pool,
        "--type",
        "kubernetes",
        "--with-healthcheck",
    ]
    assert containers(docs("prefect/worker.yaml"))[0]["args"] == worker_start
    assert f"CMD {json.dumps(worker_start)}" in (INFRA / "docker/prefect-worker.Dockerfile").read_text()
    pools_script = (INFRA / "prefect/pools.sh").read_text()
    for kind, name in NAMES["work-pools"].items():
        assert f"work-pool create {name} --type {kind}" in pools_script
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert {d["work_pool"]["name"] for d in spec["deployments"]} == set(NAMES["work-pools"].values())


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
    assert {e["name"] for e in container["env"]} == {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"}  # Ray Jobs API auth


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
    for deployment in kubernetes_deployments():
        parameters = deployment["parameters"]
        if "config" in parameters:
            assert PipelineConfig.model_validate(parameters["config"]) == expected
        else:
            assert ShardConfig.model_validate(parameters["shard"]) == expected.shard
            assert SynthConfig.model_validate(parameters["synth"]) == expected.synth
    for path in (
        expected.workdir,
        expected.synth.output,
        expected.shard.output,
        Path(expected.train.storage_path),
    ):
        assert any(path.is_relative_to(mount) for mount in NAMES["storage"]["mounts"]), path


# --- sizing (infra/sizing.py) -----------------------------------------------------------------------------


def load_sizing() -> ModuleType:
    """infra/sizing.py is a script, not a package module: import it from its path."""
    spec = importlib.util.spec_from_file_location("vidtx_infra_sizing", INFRA / "sizing.py")
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sizing = load_sizing()


def test_model_states_split_as_zero_stages_say() -> None:
    params, gpus = 1000, 8
    by_stage = [sizing.model_state_bytes(params, stage, gpus, "sgd") for stage in range(4)]
    # bf16 weights 2 + bf16 gradients 2 + fp32 master 4 + momentum 4 bytes per parameter
    assert by_stage == [12 * params, (4 + 8 / gpus) * params, (2 + 10 / gpus) * params, 12 * params / gpus]
    assert sizing.model_state_bytes(params, 0, gpus, "adamw") == 16 * params
    assert all(sizing.model_state_bytes(params, stage, 1, "sgd") == 12 * params for stage in range(4))


def test_activations_are_measured_and_grow_with_the_frames() -> None:
    from vidtx.models import create_model

    eight, sixteen = (
        sizing.activation_bytes_per_clip(create_model("xvit_tiny", num_frames=t)) for t in (8, 16)
    )
    assert eight > 0
    assert 1.9 < sixteen / eight < 2.1  # linear in tokens: fused attention keeps no (S, S) matrix


def test_plans_fill_the_global_batch_within_the_memory() -> None:
    footprint = sizing.ModelFootprint(
        "synthetic", num_params=100_000_000, depth=12, activation_bytes_per_clip=2**30
    )
    for gpus in (1, 2, 4, 8, 16):
        for memory in (24.0, 80.0):
            plan = sizing.plan(footprint, gpus, memory, global_batch=128)
            assert plan.micro_batch * plan.accumulation * gpus == 128
            assert plan.memory_gib <= sizing.USABLE_FRACTION * memory
            larger = [m for m in range(plan.micro_batch + 1, 128 // gpus + 1) if (128 // gpus) % m == 0]
            assert not larger or larger[0] > sizing.max_micro_batch(footprint, gpus, memory)
    assert sizing.plan(footprint, 1, 6.0, global_batch=128) is None  # the reserve alone fills it
    with pytest.raises(ValueError, match="multiple"):
        sizing.plan(footprint, 3, 80.0, global_batch=128)


@pytest.mark.slow
def test_readme_sizing_tables_are_what_the_script_prints() -> None:
    """The README's numbers come from `python infra/sizing.py` (X-ViT B/16, ~40 s on 2 cores)."""
    report = sizing.report(
        ["xvit_b16_8x224", "xvit_b16_16x224"], [1, 2, 4, 8, 16, 32, 64], [40, 80, 141], 128
    )
    assert report in (INFRA / "README.md").read_text()
