"""Fine-tuning (issue 45, item 3): layer-wise learning-rate decay, frozen parameters (a linear probe),
and starting from the weights of an earlier run (`model.init_from`), with the class sets compared by
name. The engines are real DeepSpeed engines in the test's own process (one rank over gloo)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from engines import trained_weights
from mlflow import MlflowClient

from vidtx.config import PipelineConfig, TrainConfig, dump_config, load_config
from vidtx.manifest import load_manifest
from vidtx.models import create_model
from vidtx.stages.train import train
from vidtx.tracking.lineage import INIT_FROM_TAG
from vidtx.train.checkpoint import TrainedModel, trained_model
from vidtx.train.ema import EMA_FILE
from vidtx.train.engine import TRUNK, build_engine, is_frozen, unmatched_patterns
from vidtx.train.optim import build_optimizer, layer_of, parameter_groups
from vidtx.train.starting_weights import classifier_names, start_from

# --- layer-wise learning-rate decay ----------------------------------------------------------------


def test_layer_decay_scales_each_layer_s_learning_rate_from_the_head_down() -> None:
    """xvit_tiny has 4 blocks: the head keeps lr, block i gets lr x 0.5^(4 - i), the embeddings
    lr x 0.5^5 (VideoMAE's rule, its layer ids 0 .. depth + 1)."""
    model = create_model("xvit_tiny")
    depth = len(model.blocks)
    assert (layer_of("patch_embed.proj.weight", depth), layer_of("cls_token", depth)) == (0, 0)
    assert layer_of("temporal_embed", depth) == 0
    assert [layer_of(f"blocks.{i}.attn.qkv.weight", depth) for i in range(depth)] == [1, 2, 3, 4]
    assert (layer_of("norm.weight", depth), layer_of("head.fc2.weight", depth)) == (5, 5)
    optimizer = build_optimizer(
        model, TrainConfig().optimizer.model_copy(update={"lr": 0.1, "layer_decay": 0.5})
    )
    lrs = {group["name"]: group["lr"] for group in optimizer.param_groups}
    assert lrs["layer_00_decay"] == pytest.approx(0.1 * 0.5**5)
    assert [lrs[f"layer_{i + 1:02d}_decay"] for i in range(depth)] == pytest.approx(
        [0.1 * 0.5 ** (4 - i) for i in range(depth)]
    )
    assert lrs["layer_05_decay"] == lrs["layer_05_no_decay"] == pytest.approx(0.1)
    trainable = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for group in optimizer.param_groups for p in group["params"]) == trainable


def test_without_layer_decay_there_are_the_two_groups_of_before() -> None:
    groups = parameter_groups(create_model("xvit_tiny"), 0.05)
    assert [(g["name"], g["weight_decay"], g["lr_scale"]) for g in groups] == [
        ("decay", 0.05, 1.0),
        ("no_decay", 0.0, 1.0),
    ]


@pytest.mark.slow
def test_an_engine_steps_each_group_at_its_decayed_learning_rate(single_process_group: None) -> None:
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=1, precision="fp32", max_steps=4)
    train.optimizer = train.optimizer.model_copy(update={"lr": 0.01, "layer_decay": 0.75})
    engine = build_engine(create_model("xvit_tiny"), train).engine
    assert engine.get_lr() == pytest.approx(
        [0.01 * group["lr_scale"] for group in engine.optimizer.param_groups]
    )


# --- frozen parameters ---------------------------------------------------------------------------------


def test_freeze_patterns_and_the_trunk() -> None:
    assert is_frozen("blocks.0.attn.qkv.weight", ["blocks.0.*"])
    assert not is_frozen("blocks.1.attn.qkv.weight", ["blocks.0.*"])
    assert is_frozen("pos_embed", [TRUNK])
    assert is_frozen("norm.weight", [TRUNK])
    assert not is_frozen("head.fc2.weight", [TRUNK])
    assert unmatched_patterns(create_model("xvit_tiny"), ["blocks.*", "blockz.*", TRUNK]) == ["blockz.*"]


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_linear_probe_keeps_the_trunk_bit_identical_and_out_of_the_optimizer(
    single_process_group: None, tmp_path: Path, stage: int
) -> None:
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=stage, precision="fp32", max_steps=3)
    train.freeze = [TRUNK]
    torch.manual_seed(train.seed)
    initial = create_model("xvit_tiny").state_dict()
    _, weights = trained_weights("xvit_tiny", train, 3, tmp_path)
    trunk = [name for name in initial if not name.startswith("head.")]
    assert trunk
    assert all(torch.equal(weights[name], initial[name]) for name in trunk)
    assert not torch.equal(weights["head.fc2.weight"], initial["head.fc2.weight"])


@pytest.mark.slow
def test_frozen_parameters_are_not_in_the_optimizer(single_process_group: None) -> None:
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=0, precision="fp32", max_steps=1)
    train.freeze = ["blocks.0.*", "patch_embed.*"]
    model = create_model("xvit_tiny")
    built = build_engine(model, train)
    optimized = {name for names in built.group_names for name in names}
    frozen = {name for name, _ in model.named_parameters() if name.startswith(("blocks.0.", "patch_embed."))}
    assert frozen
    assert not frozen & optimized
    assert optimized == {name for name, _ in model.named_parameters()} - frozen
    assert "| frozen | - | - | 14 tensors |" in built.groups_table


# --- starting from an earlier run's weights ------------------------------------------------------------


def trained_source(classes: list[str] | None, num_classes: int) -> TrainedModel:
    torch.manual_seed(7)
    return TrainedModel(create_model("xvit_tiny", num_classes=num_classes), classes)


def test_the_same_classes_continue_with_the_source_s_classifier_in_this_run_s_order() -> None:
    source = trained_source(["a", "b", "c"], 3)
    model = create_model("xvit_tiny", num_classes=3)
    report = start_from(model, source, ["c", "a", "b"], "models:/source@champion")
    assert report.initialised == []
    assert report.classes == "the same classes: its classifier continues"
    weights, mine = source.module.state_dict(), model.state_dict()
    (weight, bias) = classifier_names(model, 3)
    assert torch.equal(mine[weight], weights[weight][[2, 0, 1]])
    assert torch.equal(mine[bias], weights[bias][[2, 0, 1]])
    assert all(torch.equal(mine[n], weights[n]) for n in mine if n not in (weight, bias))
    clips = torch.randn(1, 3, model.num_frames, model.img_size, model.img_size)
    with torch.no_grad():
        assert torch.allclose(model.eval()(clips), source.module.eval()(clips)[:, [2, 0, 1]], atol=1e-6)


def test_other_classes_get_a_new_classifier_and_everything_else_is_loaded() -> None:
    source = trained_source(["a", "b", "c"], 3)
    torch.manual_seed(0)
    model = create_model("xvit_tiny", num_classes=4)
    fresh = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    report = start_from(model, source, ["a", "b", "c", "d"], "run")
    assert report.initialised == ["head.fc2.weight", "head.fc2.bias"]
    assert report.classes == "other classes (new: d): a new classifier"
    mine, weights = model.state_dict(), source.module.state_dict()
    assert all(torch.equal(mine[n], fresh[n]) for n in report.initialised)
    assert all(torch.equal(mine[n], weights[n]) for n in report.loaded)
    assert "kept as initialised (2):\n  head.fc2.weight" in report.text()


def test_a_source_without_class_names_is_compared_by_count() -> None:
    report = start_from(
        create_model("xvit_tiny", num_classes=3), trained_source(None, 3), ["x", "y", "z"], "a.pt"
    )
    assert report.initialised == []
    assert report.classes == "the same number of classes (the source records no class names)"
    other = start_from(
        create_model("xvit_tiny", num_classes=5), trained_source(None, 3), list("abcde"), "a.pt"
    )
    assert other.initialised == ["head.fc2.weight", "head.fc2.bias"]


# --- every knob in one run through the launcher `vidtx train` calls -----------------------------------


@pytest.mark.slow
def test_a_run_fine_tunes_an_earlier_run_with_the_trainer_s_knobs(trained_run: tuple, tmp_path: Path) -> None:
    """The session's trained run, fine-tuned for 4 steps on 2 Ray workers as `vidtx train FILE --set ...`
    configures it: started from its best checkpoint, patch embedding and block 0 frozen, layer decay,
    a weight average, mixup and CutMix, RandAugment, steps 2-3 profiled."""
    source_config, source = trained_run
    (tmp_path / "source.yaml").write_text(dump_config(source_config))
    config = load_config(
        tmp_path / "source.yaml",
        [
            f"workdir={tmp_path}",
            f"train.storage_path={tmp_path / 'ray'}",
            f"model.init_from={source.best_checkpoint}",
            "train.freeze=[patch_embed.*, blocks.0.*]",
            "train.optimizer.layer_decay=0.75",
            "train.ema=0.9",
            "train.mixup_alpha=0.8",
            "train.cutmix_alpha=1.0",
            "data.rand_augment={magnitude: 7, num_ops: 2}",
            "train.profile_steps=[2, 3]",
            "train.max_steps=4",
            "train.checkpoint_every=4",
            "train.zero_stage=1",
            "train.precision=fp32",  # bf16 would round the frozen weights once, as the engine starts
        ],
    )
    result = train(config, run_name="fine-tuned")

    assert (Path(result.checkpoint) / EMA_FILE).is_file()
    raw = config.model_copy(update={"eval": config.eval.model_copy(update={"weights": "raw"})})
    before = trained_model(raw, source.best_checkpoint).module.state_dict()
    after = trained_model(raw, result.checkpoint).module.state_dict()
    frozen = [name for name in after if is_frozen(name, config.train.freeze)]
    assert frozen
    assert all(torch.equal(after[name], before[name]) for name in frozen)  # bit for bit
    assert not torch.equal(after["blocks.3.mlp.fc1.weight"], before["blocks.3.mlp.fc1.weight"])

    client = MlflowClient(result.tracking_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.data.tags[INIT_FROM_TAG] == source.best_checkpoint  # lineage: where the weights came from
    started = client.download_artifacts(run.info.run_id, "init_from.txt", str(tmp_path))
    assert "the same classes: its classifier continues" in Path(started).read_text()
    groups = Path(client.download_artifacts(run.info.run_id, "param_groups.md", str(tmp_path))).read_text()
    assert "| layer_00_decay |" not in groups  # the patch embedding's matrix is frozen
    assert f"| layer_00_no_decay | {0.003 * 0.75**5:.3g} |" in groups  # tokens and positions: lr x 0.75^5
    assert "| layer_05_decay | 0.003 |" in groups  # the head: the full learning rate
    assert "| frozen | - | - | 14 tensors |" in groups
    for metric in ("val/top1", "val_ema/top1", "train/data_wait"):
        assert metric in run.data.metrics
    profile = Path(client.download_artifacts(run.info.run_id, "profile", str(tmp_path)))
    trace = json.loads(gzip.decompress((profile / "trace.json.gz").read_bytes()))
    assert any(event.get("name", "").startswith("aten::") for event in trace["traceEvents"])
    assert (profile / "operators.txt").read_text().startswith("steps 2-3\n")


@pytest.mark.slow
def test_a_registered_model_is_a_starting_point_with_its_class_names(
    tiny_config: PipelineConfig, registered_model: str
) -> None:
    """`model.init_from=models:/name@alias`: the registry's own version, its class names compared by
    name with this run's (here the same classes in another order: its classifier continues, reordered)."""
    config = tiny_config.model_copy(
        update={"tracking": tiny_config.tracking.model_copy(update={"tracking_uri": registered_model})}
    )
    source = trained_model(config, "models:/predict-test@champion")
    assert source.class_names == load_manifest(config.data.shards, "train").class_names
    model = create_model("xvit_tiny", num_classes=4, num_frames=4, img_size=32)
    report = start_from(model, source, source.class_names[::-1], "models:/predict-test@champion")
    assert report.initialised == []
    (weight, _) = classifier_names(model, 4)
    assert torch.equal(model.state_dict()[weight], source.module.state_dict()[weight].flip(0))
