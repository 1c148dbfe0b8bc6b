"""Static checks of infra/ (no Docker, no cluster), the services: ports and service addresses agree with
infra/names.yaml, compose publishes on localhost and keeps secrets in the git-ignored env file, every
server setting is one Prefect or MLflow knows, and the object store is SeaweedFS as the local stack runs it
(nothing refers to MinIO any more).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import mlflow.cli
import mlflow.environment_variables
import pytest
from infra_manifests import (
    COMPOSE,
    COMPOSE_VARIABLE,
    ENV_EXAMPLE,
    INFRA,
    NAMES,
    ROOT,
    containers,
    docs,
    env_names,
    env_value,
    weed_flags,
    weed_settings,
)
from prefect.settings import Settings

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
    # and SeaweedFS's store, which only its gateway and the bucket job reach (by host:port, no URL)
    assert set(kubernetes_services) == set(NAMES["services"]) | {"seaweedfs"}
    for name, port in NAMES["services"].items():
        assert kubernetes_services[name]["spec"]["ports"][0]["port"] == port
        assert name in COMPOSE["services"]


def test_local_and_cluster_uis_share_ports() -> None:
    """`make ui` (infra/local) and the port-forwarded cluster services open the same browser URLs."""
    from vidtx.tracking.links import LOCAL_MLFLOW_UI

    ui_script = (INFRA / "local/ui.sh").read_text()
    assert f"PREFECT_PORT=${{PREFECT_PORT:-{NAMES['services']['prefect-server']}}}" in ui_script
    assert f"MLFLOW_PORT=${{MLFLOW_PORT:-{NAMES['services']['mlflow']}}}" in ui_script
    assert f"http://127.0.0.1:{NAMES['services']['mlflow']}" == LOCAL_MLFLOW_UI
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
    assert one_shot == {"s3-buckets"}
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
    assert NAMES["mlflow-bucket"] in services["s3-buckets"]["environment"]["BUCKETS"].split()
    assert services["s3"]["environment"]["BUCKET"] == NAMES["mlflow-bucket"]
    assert (
        services["mlflow"]["environment"]["MLFLOW_S3_ENDPOINT_URL"] == f"http://s3:{NAMES['services']['s3']}"
    )
    assert "minio" not in text.lower()


def test_service_settings_are_known_to_prefect_and_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Misspelt settings are ignored silently by both servers, so every name is checked against them."""
    prefect_settings = set(Settings().to_environment_variables(exclude_unset=False))
    # secrets without a default (PREFECT_SERVER_API_AUTH_STRING) are listed once they are set
    monkeypatch.setenv("PREFECT_SERVER_API_AUTH_STRING", "admin:x")
    prefect_settings |= set(Settings().to_environment_variables(exclude_unset=True))
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
        if d["kind"] == "Deployment" and d["metadata"]["name"] in server_containers:
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


# --- the object store: SeaweedFS, as the local stack runs it --------------------------------------------

GATEWAY_SCRIPT = (INFRA / "docker/seaweedfs/s3-gateway.sh").read_text()


def kubernetes(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs("k8s/services.yaml") if (d["kind"], d["metadata"]["name"]) == (kind, name)]
    return found


def test_the_object_store_runs_with_the_local_stacks_settings(tmp_path: Path) -> None:
    """compose and Kubernetes start the store and the gateway with the flags `make stack` and the tests
    run (infra/local/s3_server.py), less addresses, ports and paths: telemetry off, no S3 inside the
    store, no WebDAV, admin UI, Iceberg or Lance server; the administrator may what the local keys may."""
    from infra.local.s3_server import ACTIONS, STORE_PORTS, SeaweedFS

    local = SeaweedFS(tmp_path, 1, {}, dict.fromkeys((*STORE_PORTS, "s3_grpc"), 1)).commands()
    local_store, local_gateway = local["store"][1:], local["gateway"][1:]
    assert weed_settings(local_store)["master.telemetry"] == "false"
    (kubernetes_store,) = containers(kubernetes("StatefulSet", "seaweedfs"))
    for store in (COMPOSE["services"]["seaweedfs"]["command"], kubernetes_store["args"]):
        assert store[0] == local_store[0] == "mini"
        assert weed_settings(store) == weed_settings(local_store)
    gateway = GATEWAY_SCRIPT.split("exec weed ", 1)[1].split()
    assert gateway[0] == local_gateway[0] == "s3"
    assert weed_settings(gateway) == weed_settings(local_gateway)
    assert {"filer", "config"} <= set(weed_flags(gateway))
    assert json.dumps(ACTIONS) in GATEWAY_SCRIPT


def test_the_store_keeps_its_data_on_a_volume_and_is_reached_by_its_name() -> None:
    services = COMPOSE["services"]
    data = weed_flags(services["seaweedfs"]["command"])["dir"]
    named = [v.split(":")[0] for v in services["seaweedfs"]["volumes"] if v.split(":")[1] == data]
    assert named, "the store's -dir is on no volume"
    assert set(named) <= set(COMPOSE["volumes"])  # a named volume: `down` keeps it
    statefulset = kubernetes("StatefulSet", "seaweedfs")
    (store,) = containers(statefulset)
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    data = weed_flags(store["args"])["dir"]
    assert [m for m in store["volumeMounts"] if m["mountPath"] == data and m["name"] in claims]

    # the store's parts, the gateway and the bucket job reach it by its service name, at its ports
    service = kubernetes("Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"  # headless: the name is the pod's, ready or not
    assert service["spec"]["publishNotReadyAddresses"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert {p["name"]: p["containerPort"] for p in store["ports"]} == ports
    for name, args in (
        ("seaweedfs", services["seaweedfs"]["command"]),
        (service["metadata"]["name"], store["args"]),
    ):
        assert weed_flags(args)["ip"] == name == statefulset["metadata"]["name"]
    (gateway,) = containers(kubernetes("Deployment", "s3"))
    (buckets,) = containers(kubernetes("Job", "s3-buckets"))
    for client in (services["s3"], services["s3-buckets"], gateway, buckets):
        assert env_value(client, "FILER") == f"seaweedfs:{ports['filer']}"
    for client in (services["s3-buckets"], buckets):
        assert env_value(client, "MASTER") == f"seaweedfs:{ports['master']}"
    assert "/cluster/healthz" in " ".join(services["seaweedfs"]["healthcheck"]["test"])
    assert store["readinessProbe"]["httpGet"] == {"path": "/cluster/healthz", "port": ports["master"]}


def test_the_s3_gateway_is_ready_on_healthz_and_takes_its_keys_from_the_secrets() -> None:
    port = NAMES["services"]["s3"]
    assert f"http://127.0.0.1:{port}/healthz" in COMPOSE["services"]["s3"]["healthcheck"]["test"]
    (gateway,) = containers(kubernetes("Deployment", "s3"))
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert {p["containerPort"] for p in gateway["ports"]} == {port}
    assert f'-port="${{S3_PORT:-{port}}}"' in GATEWAY_SCRIPT

    # every key the script writes into the identities file comes from the env file / the Secret
    read = set(re.findall(r"\$\{?(\w+)", GATEWAY_SCRIPT))
    keys = {name for name in ENV_EXAMPLE if name.startswith(("S3_", "MLFLOW_S3_"))}
    assert read & set(ENV_EXAMPLE) == keys
    assert all(COMPOSE["services"]["s3"]["environment"][key].startswith(f"${{{key}:?") for key in keys)
    secret_refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in gateway["env"] if "valueFrom" in e}
    assert secret_refs == {key: {"name": NAMES["secrets"], "key": key} for key in keys}
    for container in (COMPOSE["services"]["s3"], gateway):
        assert read - {"S3_PORT"} <= env_names(container)
        assert env_value(container, "BUCKET") == NAMES["mlflow-bucket"]  # MLflow's key: that bucket only
    assert '"Write:$BUCKET"' in GATEWAY_SCRIPT


def test_the_buckets_are_the_local_stacks_and_mlflow_uses_its_own() -> None:
    from infra.local.stack import BUCKETS

    (job,) = containers(kubernetes("Job", "s3-buckets"))
    for container in (COMPOSE["services"]["s3-buckets"], job):
        assert sorted(env_value(container, "BUCKETS").split()) == sorted(BUCKETS)
    assert NAMES["mlflow-bucket"] in BUCKETS
    (mlflow,) = containers(kubernetes("Deployment", "mlflow"))
    for container in (COMPOSE["services"]["mlflow"], mlflow):
        assert env_value(container, "MLFLOW_S3_ENDPOINT_URL") == f"http://s3:{NAMES['services']['s3']}"
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in mlflow["env"] if "AWS_" in e["name"]} == {
        "AWS_ACCESS_KEY_ID": "MLFLOW_S3_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY": "MLFLOW_S3_SECRET_KEY"
    }  # fmt: skip


def test_nothing_in_infra_refers_to_minio() -> None:
    """MinIO is gone: no manifest, script, Dockerfile or env name names it (infra/README.md still does,
    as one of the stores vidtx can be pointed at)."""
    files = [
        p for p in INFRA.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.name != "README.md"
    ]
    assert [str(p.relative_to(ROOT)) for p in files if "minio" in p.read_text(errors="replace").lower()] == []
    assert not (INFRA / "docker/minio").exists()
    assert not [name for name in ENV_EXAMPLE if "MINIO" in name]
