"""Batch scoring with `vidtx predict`: folders, CSV lists and bucket prefixes in, one table out, in this
process or as a Ray Data job, with the same rows either way."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from vidtx import storage
from vidtx.models.heads import classifier_layer
from vidtx.results import WindowClassification
from vidtx.tracking.model_registry import load_registered_model

pytestmark = pytest.mark.slow
MODEL = "models:/predict-test@champion"


@pytest.fixture
def video_folder(tmp_path: Path, write_mp4: Callable[..., Path]) -> Path:
    """videos/a/{0,1}.mp4, videos/b/2.mp4, a broken videos/b/bad.mp4, a hidden one and a text file."""
    folder = tmp_path / "videos"
    for i, name in enumerate(["a/0.mp4", "a/1.mp4", "b/2.mp4", ".hidden/3.mp4"]):
        write_mp4(folder / name, num_frames=8 + i, width=32, height=32)
    (folder / "b" / "bad.mp4").write_bytes(b"not a video")
    (folder / "b" / "notes.txt").write_text("not a video either\n")
    return folder


def table(path: Path) -> pd.DataFrame:
    frame = pq.read_table(path).to_pandas()
    return frame.sort_values("path", ignore_index=True)


def test_a_folder_and_a_csv_list_become_one_parquet_table(
    vidtx, registered_model: str, video_folder: Path, tmp_path: Path
) -> None:
    listed = tmp_path / "list.csv"
    listed.write_text("path,label\nvideos/a/0.mp4,x\nvideos/missing.mp4,y\n")  # relative to the CSV
    output = tmp_path / "out" / "predictions.parquet"
    model = ("--model", MODEL, "--tracking-uri", registered_model)
    result = vidtx(
        "predict", str(video_folder), str(listed), *model, "--top-k", "2", "--output", str(output),
        "--set", "predict.embeddings=true",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # two videos could not be read
    assert result.stdout.splitlines()[-1] == (
        f"6 videos scored by models:/predict-test/1, 2 unreadable, table {output}"
    )
    rows = table(output)
    schema = pq.read_schema(output)
    # a single-label model's table: no label sets (columns labels and label_scores)
    assert list(schema.names) == [
        "path",
        "label",
        "score",
        "top_k_labels",
        "top_k_scores",
        "error",
        "embedding",
    ]
    registered = load_registered_model(MODEL, registered_model)
    width = classifier_layer(registered.module, len(registered.class_names))[
        1
    ].in_features  # the pre-logits embedding: a vector index's rows
    assert schema.field("embedding").type == pa.list_(pa.float32())
    assert schema.field("embedding").metadata == {b"dim": str(width).encode()}
    assert rows["path"].tolist() == sorted(
        [*(str(video_folder / n) for n in ("a/0.mp4", "a/1.mp4", "b/2.mp4", "b/bad.mp4", "a/0.mp4")),
         str(tmp_path / "videos/missing.mp4")]
    )  # fmt: skip
    good = rows[rows["error"].isna()]
    assert len(good) == 4
    assert all(len(labels) == 2 for labels in good["top_k_labels"])
    assert (good["score"] == good["top_k_scores"].map(lambda scores: scores[0])).all()
    errors = dict(zip(rows["path"], rows["error"], strict=True))
    assert errors[str(tmp_path / "videos/missing.mp4")] == "No such file or directory"
    assert errors[str(video_folder / "b/bad.mp4")]
    assert rows[rows["error"].notna()]["label"].isna().all()
    assert rows[rows["error"].notna()]["embedding"].isna().all()
    assert all(len(embedding) == width for embedding in good["embedding"])


def test_a_bucket_prefix_scored_on_ray_gives_the_rows_scored_here(
    vidtx, registered_model: str, video_folder: Path, bucket: str, tmp_path: Path
) -> None:
    for video in ("a/0.mp4", "a/1.mp4", "b/2.mp4", "b/bad.mp4"):
        storage.upload(video_folder / video, f"{bucket}/videos/{video}")
    model = ("--model", MODEL, "--tracking-uri", registered_model)
    here = vidtx("predict", f"{bucket}/videos", *model, "--output", f"{bucket}/here.parquet")
    assert here.returncode == 1, here.stderr
    on_ray = vidtx(
        "predict", f"{bucket}/videos", *model, "--output", str(tmp_path / "ray.csv"),
        "--set", "predict.ray_address=local", "--set", "predict.batch_size=2",
    )  # fmt: skip
    assert on_ray.returncode == 1, on_ray.stderr
    assert on_ray.stdout, on_ray.stderr
    assert on_ray.stdout.splitlines()[-1].startswith(
        "4 videos scored by models:/predict-test/1, 1 unreadable"
    )
    with storage.local_copy(f"{bucket}/here.parquet") as local:
        expected = table(local)
    scored = pd.read_csv(tmp_path / "ray.csv").sort_values("path", ignore_index=True)
    assert scored["path"].tolist() == expected["path"].tolist()
    assert scored["path"].tolist()[0] == f"{bucket}/videos/a/0.mp4"
    for (_, row), (_, want) in zip(scored.iterrows(), expected.iterrows(), strict=True):
        if pd.notna(want["error"]):
            assert row["error"] == want["error"]
            continue
        assert json.loads(row["top_k_labels"]) == list(want["top_k_labels"])
        assert json.loads(row["top_k_scores"]) == pytest.approx(list(want["top_k_scores"]), abs=1e-6)
        assert row["label"] == want["label"]


def test_a_long_video_is_scored_window_by_window_then_as_a_whole(
    vidtx, registered_model: str, write_mp4: Callable[..., Path], tmp_path: Path
) -> None:
    """10 s at 8 fps, windows of 4 s every 2 s: [0, 4), [2, 6), [4, 8), [6, 10), each from its own
    views, then the video's row, the mean of the windows' probabilities; a window longer than the
    video is one window, and its row says so."""
    video = write_mp4(tmp_path / "long.mp4", num_frames=80, width=32, height=32, fps=8.0)
    classifier = load_registered_model(MODEL, registered_model)
    classes = len(classifier.class_names)
    views = {"top_k": classes, "num_clips": 1, "num_crops": 1}
    rows = classifier.classify_windows(str(video), window=4, hop=2, embedding=True, **views)
    assert [(row.window, row.start, row.end) for row in rows] == [
        (0, 0.0, 4.0), (1, 2.0, 6.0), (2, 4.0, 8.0), (3, 6.0, 10.0), (None, 0.0, 10.0)
    ]  # fmt: skip
    assert all(row.error is None and row.note is None for row in rows)

    def distribution(row: WindowClassification) -> torch.Tensor:
        order = sorted(range(classes), key=lambda i: row.top_k_labels[i])
        return torch.tensor([row.top_k_scores[i] for i in order])

    *windows, whole = rows
    torch.testing.assert_close(distribution(whole), torch.stack([distribution(w) for w in windows]).mean(0))
    torch.testing.assert_close(
        torch.tensor(whole.embedding), torch.tensor([w.embedding for w in windows]).mean(0)
    )
    (one, whole) = classifier.classify_windows(str(video), window=30, hop=30, **views)
    assert (one.window, one.start, one.end) == (0, 0.0, 10.0)
    assert one.note == whole.note == "predict.window 30 s covers the whole video (10.00 s): one window"

    # `vidtx predict` writes the same rows, the window's place in each, and prints where each is
    output = tmp_path / "windows.parquet"
    model = ("--model", MODEL, "--tracking-uri", registered_model)
    done = vidtx(
        "predict", str(video), *model, "--output", str(output),
        "--set", "predict.window=4", "--set", "predict.hop=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"{video} [window 3: 6.00-10.00 s]" in done.stdout.splitlines()
    assert f"{video} [whole video: 0.00-10.00 s]" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1].startswith("1 videos scored by models:/predict-test/1")
    table = pq.read_table(output).to_pandas()
    assert list(table.columns[:5]) == ["path", "window", "start", "end", "note"]
    assert table["start"].tolist() == [0.0, 2.0, 4.0, 6.0, 0.0]
    assert table["window"].isna().tolist() == [False] * 4 + [True]
    hop_alone = vidtx("predict", str(video), *model, "--set", "predict.hop=2")
    assert hop_alone.returncode == 2
    assert "predict: hop 2 without a window: set predict.window too" in hop_alone.stderr
