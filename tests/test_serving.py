"""The registered model as MLflow's own tools use it: pyfunc in Python, `mlflow models serve` over HTTP,
its network without the wrapper, what registration logs and checks."""

from __future__ import annotations

import ast
import base64
import contextlib
import importlib
import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
from media import truncated
from packaging.requirements import Requirement
from sockets import exposed, listening_sockets, process_tree

from infra.local.ports import free_port
from vidtx.eval.multiview import predict_split
from vidtx.manifest import load_manifest
from vidtx.models import load_checkpoint
from vidtx.models.heads import classifier_layer
from vidtx.serving import packaging as logged
from vidtx.serving.classifier import OUTPUT_COLUMNS
from vidtx.stages.trained_model import load_trained_model
from vidtx.tracking.model_registry import load_registered_model, register
from vidtx.tracking.runs import connect, mlflow_uris, start_or_resume_run

pytestmark = pytest.mark.slow
CHAMPION = "models:/predict-test@champion"


@pytest.fixture
def videos(tmp_path: Path, write_mp4: Callable[..., Path]) -> list[bytes]:
    """Two real MP4s (different sizes) and one that is not a video."""
    good = [
        write_mp4(tmp_path / f"v{i}.mp4", num_frames=10, width=w, height=h)
        for i, (w, h) in enumerate([(48, 32), (32, 40)])
    ]
    return [good[0].read_bytes(), truncated(good[1].read_bytes()), good[1].read_bytes()]


@pytest.fixture
def pyfunc(registered_model: str, monkeypatch: pytest.MonkeyPatch) -> mlflow.pyfunc.PyFuncModel:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader puts the model's code first for good
    with mlflow_uris(registered_model):
        return mlflow.pyfunc.load_model(CHAMPION)


def test_pyfunc_answers_labels_scores_and_an_error_per_video(
    pyfunc: mlflow.pyfunc.PyFuncModel, videos: list[bytes], tmp_path: Path
) -> None:
    answer = pyfunc.predict(pd.DataFrame({"video": videos}), params={"top_k": 3})
    assert list(answer.columns) == list(OUTPUT_COLUMNS)
    good, bad, other = answer.to_dict("records")
    classes = pyfunc.unwrap_python_model().class_names
    for row in (good, other):
        assert row["error"] is None
        assert row["label"] in classes
        assert (row["label"], row["score"]) == (row["top_k_labels"][0], row["top_k_scores"][0])
        assert len(row["top_k_scores"]) == 3
        assert row["top_k_scores"] == sorted(row["top_k_scores"], reverse=True)
    assert bad["error"]
    assert (bad["label"], bad["score"], bad["top_k_labels"], bad["top_k_scores"]) == (None, None, [], [])
    # every class: the probabilities of the mean softmax add up to one
    everything = pyfunc.predict(pd.DataFrame({"video": videos[:1]}), params={"top_k": len(classes)})
    assert sum(everything["top_k_scores"][0]) == pytest.approx(1.0, abs=1e-5)
    # paths instead of bytes: the same answer
    path = tmp_path / "same.mp4"
    path.write_bytes(videos[0])
    by_path = pyfunc.predict(pd.DataFrame({"video": [str(path)]}), params={"top_k": 3}).iloc[0]
    assert by_path["top_k_labels"] == good["top_k_labels"]
    assert by_path["top_k_scores"] == pytest.approx(good["top_k_scores"])
    # on request, each video's pre-logits embedding: the classifier layer maps it to the mean logits
    assert good["embedding"] is None
    embedded = pyfunc.predict(pd.DataFrame({"video": videos}), params={"top_k": 3, "embedding": True})
    assert embedded["embedding"][1] is None
    served = pyfunc.unwrap_python_model()
    _, layer = classifier_layer(served.module, len(classes))
    embedding = torch.tensor(embedded["embedding"][0])
    assert embedding.shape == (layer.in_features,)
    views = {key: served.default_params()[key] for key in ("num_clips", "num_crops")}
    with torch.no_grad():
        torch.testing.assert_close(
            layer(embedding), served.view_logits(videos[0], **views).mean(0), atol=1e-5, rtol=0
        )


def test_the_served_logits_are_evaluations_for_the_same_video(registered_model: str) -> None:
    classifier = load_registered_model(CHAMPION, registered_model)
    data = classifier.config.data
    views = {"num_clips": 2, "num_crops": 3}
    evaluated = predict_split(classifier.module, data, "val", **views, batch_size=2)
    manifest = load_manifest(data.shards, "val")
    with tarfile.open(Path(data.shards) / manifest.shards[0].name) as tar:
        members = {
            member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()
        }
    key = next(name.rsplit(".", 1)[0] for name in members if name.endswith(".json"))
    meta = json.loads(members[f"{key}.json"])
    video = next(
        payload
        for name, payload in members.items()
        if name.startswith(f"{key}.") and not name.endswith(".json")
    )
    served = classifier.view_logits(video, **views)  # (6, K)
    assert served.shape == (6, len(classifier.class_names))
    expected = evaluated.logits[evaluated.keys.index(str(meta["key"]))]
    torch.testing.assert_close(served, expected, rtol=0, atol=1e-5)


def test_the_network_is_reachable_without_the_wrapper(registered_model: str, tmp_path: Path) -> None:
    classifier = load_registered_model(CHAMPION, registered_model)
    with mlflow_uris(registered_model):  # as the README says: the artifacts, then vidtx.models
        local = Path(mlflow.artifacts.download_artifacts(CHAMPION, dst_path=str(tmp_path)))
    network = load_checkpoint(local / "artifacts" / "model.pt").eval()
    assert json.loads((local / "artifacts" / "labels.json").read_text()) == classifier.class_names
    config = classifier.config.model_copy(deep=True)
    config.tracking.tracking_uri = registered_model
    through_stages = load_trained_model(config, CHAMPION)  # evaluation and fine-tuning from the registry
    clips = torch.randn(2, 3, config.data.num_frames, config.data.crop_size, config.data.crop_size)
    with torch.no_grad():
        torch.testing.assert_close(network(clips), classifier.module(clips))
        torch.testing.assert_close(through_stages(clips), classifier.module(clips))


@pytest.fixture
def served(registered_model: str) -> Iterator[str]:
    """`mlflow models serve` of the champion on 127.0.0.1, as a subprocess: its address."""
    port = free_port()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # mlflow runs `uvicorn` from it
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", CHAMPION, "--env-manager", "local",
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    server = subprocess.Popen(
        command, env=os.environ | {"MLFLOW_TRACKING_URI": registered_model, "PATH": path}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, server.stderr.read()
            try:
                with urllib.request.urlopen(f"{address}/ping", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "mlflow models serve did not answer /ping in 180 s"
                time.sleep(1)
        assert exposed(listening_sockets(process_tree(server.pid))) == {}
        yield address
    finally:
        with contextlib.suppress(ProcessLookupError):  # ended already
            os.killpg(server.pid, 15)
        server.wait(timeout=60)


def post(address: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(f"{address}/invocations", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_mlflow_models_serve_answers_videos_over_http(served: str, videos: list[bytes]) -> None:
    encoded = [[base64.b64encode(video).decode()] for video in videos]
    body = {"dataframe_split": {"columns": ["video"], "data": encoded}, "params": {"top_k": 3}}
    status, answer = post(served, json.dumps(body).encode())
    assert status == 200, answer
    good, bad, other = answer["predictions"]
    assert set(good) == set(OUTPUT_COLUMNS)
    assert (good["error"], len(good["top_k_labels"]), good["label"]) == (None, 3, good["top_k_labels"][0])
    assert other["error"] is None
    assert bad["error"]
    assert (bad["label"], bad["score"], bad["top_k_labels"]) == (None, None, [])
    # bad requests: 4xx with MLflow's message, never a 500 with a traceback
    for body in (b"", json.dumps({"dataframe_split": {"columns": ["clip"], "data": encoded[:1]}}).encode()):
        status, answer = post(served, body)
        assert 400 <= status < 500, (status, answer)
        assert answer["message"]
        assert "Traceback" not in answer["message"]
    assert re.search(r"video", post(served, body)[1]["message"])  # the wrong column names the one it needs


def test_registration_fails_loudly_when_the_example_is_not_answered(
    registered_model: str, tiny_config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from vidtx.eval.multiview import evaluate
    from vidtx.model_factory import model_for

    config = tiny_config.model_copy(deep=True)
    config.workdir, config.eval.num_crops, config.registry.model_name = tmp_path, 1, "unanswered"
    model = model_for(config)
    result = evaluate(model, load_manifest(config.data.shards, "val"), config.data, config.eval)
    monkeypatch.setattr(logged, "example_video", lambda config: b"not a video at all")
    client = connect(f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(logged.InvalidServingInputError, match="could not read its input example"):
        register(model, config, result, client=client, run_id=start_or_resume_run(client, config, "x"))
    assert client.search_registered_models() == []  # nothing registered


def _requirement_closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` install, following each one's own requirements (those whose
    markers hold here, no extras)."""
    seen: set[str] = set()
    pending = [Requirement(requirement) for requirement in requirements]
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = metadata.distribution(requirement.name).metadata["Name"].lower().replace("_", "-")
        if name not in seen:
            seen.add(name)
            pending += [Requirement(r) for r in metadata.requires(name) or []]
    return seen


def test_pip_requirements_cover_everything_the_model_imports(
    registered_model: str, videos: list[bytes], tmp_path: Path
) -> None:
    """A fresh process loads the model with MLflow and predicts; every distribution that the vidtx
    modules it then has loaded import is one of the model's pip requirements or installed by them,
    and every requirement is one of those distributions."""
    video = tmp_path / "clip.mp4"
    video.write_bytes(videos[0])
    script = f"""
import json, sys
import mlflow, pandas as pd
answer = mlflow.pyfunc.load_model("{CHAMPION}").predict(pd.DataFrame({{"video": [r"{video}"]}}))
assert answer["error"][0] is None, answer
print(json.dumps(sorted(name for name in list(sys.modules) if name.split(".")[0] == "vidtx")))
"""
    environment = os.environ | {"MLFLOW_TRACKING_URI": registered_model}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment)
    assert done.returncode == 0, done.stderr
    imported = set()
    modules = [importlib.import_module(name) for name in json.loads(done.stdout.splitlines()[-1])]
    for module in (m for m in modules if m.__file__):  # read here (it ran the model's copy); no namespaces
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"vidtx", "__future__"}
    owners = metadata.packages_distributions()
    needed = {owners[name][0].lower().replace("_", "-") for name in third_party}
    assert needed - _requirement_closure(logged.pip_requirements()) == set()
    imported_distributions = {d.lower() for name in third_party for d in owners[name]}  # mlflow: 3 of them
    listed = {requirement.split("==")[0].lower() for requirement in logged.pip_requirements()}
    assert listed - imported_distributions == set(), "a requirement the served model never imports"
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][^+]*", r) for r in logged.pip_requirements())
