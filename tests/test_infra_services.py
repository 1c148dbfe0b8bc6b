"""Static checks of infra/ (no Docker, no cluster), the services: ports and service addresses agree with
infra/names.yaml, compose publishes on localhost and keeps secrets in the git-ignored env file, and every
server setting is one Prefect or MLflow knows.
"""

from __future__ import annotations

import re
import subprocess

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
