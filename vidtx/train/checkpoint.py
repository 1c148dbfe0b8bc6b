"""Checkpoints: every rank saves its DeepSpeed shard, all ranks report it to Ray Train together; and
any trained model named by a checkpoint or a registry URI back as a module.

Ray Train merges the ranks' files into one checkpoint directory under `<storage>/<run name>/`, keeps
the best ones by validation top-1 plus always the latest, and hands the latest back through
`ray.train.get_checkpoint()` after a restart. Each holds the class names it was trained on
(`class_names.json`), and the weight average when the run keeps one (`ema.pt`). `consolidated_state_dict` turns any of them into a plain fp32 state dict
(DeepSpeed's own ZeRO consolidation for stages 1-3); `trained_model` reads a Ray checkpoint, a vidtx
`.pt` file or a registered model (`models:/<name>@<alias>`): the one resolver that evaluation, the
registry's packaging and a training's `model.init_from` use.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import ray.train
import torch
from torch import nn

from vidtx import storage
from vidtx.config import ConfigError, PipelineConfig
from vidtx.model_factory import masked_autoencoder, model_for
from vidtx.models import load_checkpoint
from vidtx.models.mae import MaskedAutoencoder, decoder_state
from vidtx.models.videomae_checkpoints import is_videomae_source, read_videomae
from vidtx.models.weights import read_checkpoint
from vidtx.tracking.model_registry import load_registered_model
from vidtx.tracking.runs import resolve_tracking_uri
from vidtx.train.accelerator import import_deepspeed
from vidtx.train.ema import WeightAverage, load_average
from vidtx.train.optim import parameter_groups

TAG = "state"  # DeepSpeed tag inside every checkpoint directory ("latest" would clash with its index file)
MODEL_STATES = "mp_rank_00_model_states.pt"
CLASS_NAMES = "class_names.json"  # beside the shards: the logit order the weights were trained for
# beside the shards, in a pretraining's checkpoints: the config it pretrained (the architecture and
# the decoder to read its state back with; the encoder's frames and crop size)
PRETRAINED = "pretrained.json"
GROUP_NAMES = "param_group_names"  # client state: each optimizer group's parameter names


@dataclasses.dataclass
class TrainState:
    """What the loop needs besides model/optimizer/scheduler to continue where it stopped."""

    step: int = 0  # optimizer steps completed
    epoch: int = 0  # the data epoch under way
    samples_seen: int = 0  # clips over all ranks
    best_top1: float = -1.0
    # each rank's place in its epoch (`TrainLoader.state_dict`, by rank): a resumed run's loaders go
    # on from there; a checkpoint without them (older vidtx) resumes with the next epoch
    data: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def save_and_report(
    engine: Any,
    state: TrainState,
    metrics: dict[str, float],
    class_names: list[str],
    group_names: list[list[str]],
    ema: WeightAverage | None = None,
    pretrained: PipelineConfig | None = None,
) -> None:
    """Collective: every rank writes its shard, then every rank reports (Ray merges the directories).
    The client state holds the loop's state and `group_names`, each optimizer group's parameter names
    (what ZeRO-0's fp32 master copies are matched by in `consolidated_state_dict`); rank 0 adds the
    weight average, if the run keeps one; a pretraining's checkpoint records its config (`pretrained`)."""
    client_state = {"train_state": dataclasses.asdict(state), GROUP_NAMES: group_names}
    with tempfile.TemporaryDirectory(prefix="vidtx-ckpt-") as directory:
        engine.save_checkpoint(directory, tag=TAG, client_state=client_state)
        Path(directory, CLASS_NAMES).write_text(json.dumps(class_names))
        if pretrained is not None:
            Path(directory, PRETRAINED).write_text(pretrained.model_dump_json())
        if ema is not None and engine.global_rank == 0:
            ema.save(directory)
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(directory),
            checkpoint_dir_name=f"checkpoint-{state.step:08d}",
        )


def restore(engine: Any, ema: WeightAverage | None = None) -> TrainState | None:
    """Load the latest reported checkpoint into the engine (model, optimizer, scheduler) and `ema`, if any."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        path, client_state = engine.load_checkpoint(directory, tag=TAG)
        if ema is not None:
            ema.load(directory)
        # Ray downloads a checkpoint in a bucket once per node, into a folder its ranks share, and the
        # last rank out deletes it. One that came in while the deletion ran found no folder and failed
        # the restart ("Checkpoint directory ... does not exist, even though it should have been
        # created by another process": Ray 2.60, 1 of 5 runs of test_train's killed worker). No rank
        # leaves before every rank is in.
        torch.distributed.barrier()
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load the checkpoint in {checkpoint.path}")
    return TrainState(**client_state["train_state"])


def consolidated_state_dict(checkpoint_dir: str | Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """fp32 weights of `model`'s architecture from a checkpoint directory of any ZeRO stage.

    Stages 1-3 go through DeepSpeed's consolidation (frozen parameters, which stage 1 leaves out of it,
    from the model states file). Stage 0 keeps full weights in the model states file; in bf16 those are bf16, and the fp32 master copies sit in the optimizer state, in the order of
    `parameter_groups(model)`.
    """
    checkpoint_dir = Path(checkpoint_dir)
    if list((checkpoint_dir / TAG).glob("*_optim_states.pt")):
        import_deepspeed()
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        weights = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir), tag=TAG)
        # ZeRO-1 leaves frozen parameters out of its consolidation: they are whole in the model states
        (states_file,) = (checkpoint_dir / TAG).glob(f"*{MODEL_STATES}")  # ZeRO-3: zero_pp_rank_0_mp_...
        module = torch.load(states_file, map_location="cpu", weights_only=True)["module"]
        missing = {
            name: tensor.float() for name, tensor in module.items() if name not in weights and tensor.numel()
        }
        return weights | missing
    states = torch.load(checkpoint_dir / TAG / MODEL_STATES, map_location="cpu", weights_only=True)
    weights = {name: tensor.float() for name, tensor in states["module"].items()}
    master = (states.get("optimizer") or {}).get("fp32_groups")
    if master is not None:
        groups = states.get(GROUP_NAMES) or group_names(model, parameter_groups(model, 0.0))  # older files
        for names, fp32_params in zip(groups, master, strict=True):
            for name, fp32 in zip(names, fp32_params, strict=True):
                weights[name] = fp32.float()
    return weights


def group_names(model: nn.Module, groups: list[dict]) -> list[list[str]]:
    """The parameter names of each of `model`'s parameter groups, in order."""
    names = {id(param): name for name, param in model.named_parameters()}
    return [[names[id(param)] for param in group["params"]] for group in groups]


@dataclasses.dataclass
class TrainedModel:
    """A trained network and the class names its logits stand for (None: not recorded); a pretraining's
    decoder (the masked autoencoder's tensors but the encoder's; empty: none), and what was found
    where the source is no vidtx model (a VideoMAE checkpoint: its layout and sizes, in a line)."""

    module: nn.Module
    class_names: list[str] | None
    decoder: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    found: str | None = None
    decoder_heads: int | None = None  # the decoder's attention heads, where known (not in its tensors)


def trained_model(config: PipelineConfig, checkpoint: str) -> TrainedModel:
    """The model of `checkpoint`: a Ray checkpoint is read into the architecture `config` trains, with
    as many classes as it records (else as `config`'s data has); a `.pt` file, a registered model and
    a VideoMAE checkpoint (`vidtx.models.videomae_checkpoints`: a Hugging Face folder or file, an
    official `.pth`) carry their own architecture."""
    if checkpoint.startswith("models:/"):
        classifier = load_registered_model(checkpoint, resolve_tracking_uri(config))
        return TrainedModel(classifier.module, classifier.class_names)
    if checkpoint.endswith(".pt"):
        with storage.local_copy(checkpoint) as local:
            saved = read_checkpoint(local)
        return TrainedModel(load_checkpoint(saved), None, saved.decoder)
    if is_videomae_source(checkpoint):  # a folder on this machine, or a file anywhere
        with storage.local_copy(checkpoint) as local:
            found = dataclasses.replace(read_videomae(local), source=checkpoint)
        heads = found.decoder_options.get("decoder_heads")
        return TrainedModel(found.encoder(), found.class_names, found.weights.decoder, found.summary(), heads)
    with ray.train.Checkpoint(checkpoint).as_directory() as directory:
        if not Path(directory, TAG).is_dir():
            raise ValueError(f"{checkpoint}: no DeepSpeed {TAG}/ in it: not a checkpoint of a vidtx run")
        if (pretraining := Path(directory, PRETRAINED)).is_file():
            pretrained = PipelineConfig.model_validate(json.loads(pretraining.read_text()))
            autoencoder = pretrained_autoencoder(directory, pretrained)
            decoder = decoder_state(autoencoder.state_dict())
            return TrainedModel(
                autoencoder.encoder, None, decoder, decoder_heads=pretrained.pretrain.decoder_heads
            )
        recorded = Path(directory, CLASS_NAMES)
        class_names = json.loads(recorded.read_text()) if recorded.is_file() else None
        model = model_for(config, num_classes=len(class_names) if class_names else None)
        model.load_state_dict(
            consolidated_state_dict(directory, model) | _chosen_average(config, directory, checkpoint)
        )
    return TrainedModel(model, class_names)


def pretrained_autoencoder(directory: str, pretrained: PipelineConfig) -> MaskedAutoencoder:
    """The masked autoencoder of a pretraining's checkpoint: the one `pretrained` configured (its
    model, decoder, frames and crop size), with its raw weights."""
    model = masked_autoencoder(pretrained)
    model.load_state_dict(consolidated_state_dict(directory, model))
    return model


def _chosen_average(config: PipelineConfig, directory: str, checkpoint: str) -> dict[str, torch.Tensor]:
    """The weight average that `eval.weights` puts over a checkpoint's raw weights (none for raw)."""
    choice = config.eval.weights
    average = load_average(directory) if choice != "raw" else None
    if choice == "ema" and average is None:
        raise ConfigError(
            f"eval.weights: ema, but {checkpoint} holds no weight average (trained without train.ema)"
        )
    return average or {}


def load_trained_model(config: PipelineConfig, checkpoint: str) -> nn.Module:
    """`trained_model`'s network, in eval mode."""
    return trained_model(config, checkpoint).module.eval()
