"""`model.init_from`: a training that starts from the weights of an earlier one.

The source is whatever `vidtx.train.checkpoint.trained_model` reads: a Ray checkpoint of a vidtx run,
a vidtx `.pt` file, or a registered model (`models:/<name>@<alias>`), with the class names it was
trained on (a pretraining's checkpoint: its encoder, no classes). Classes are compared by name: the
same classes, in any order, keep the source's classifier (its rows put in this run's order); other
classes get this model's new classifier, as initialised, and every other tensor is loaded. A source
that does not record its class names (a `.pt` file, a pretrained encoder) is compared by count.

A VideoMAE checkpoint (a Hugging Face folder or file, an official `.pth`) is a source too, read by
`vidtx.models.videomae_checkpoints`; a fine-tune from a pretraining's encoder follows VideoMAE's
recipe (`FINE_TUNING_FRESH`: its final norm unused, a new `fc_norm` under the mean pooling), and a
pretraining that starts from one (or from a vidtx pretraining's checkpoint) takes its decoder too.

Frames and crop size may differ from the source's: its position tables are resized to this model's
(the spatial grid of `pos_embed` bicubically, the time steps of `temporal_embed` linearly). Any other
tensor outside what the model starts afresh that it lacks or shapes otherwise (another architecture
or size) is refused: `check_starting_weights` says so in one line on the driver, before any Ray
worker starts. The report says what was found, which tensors came from the source, which were resized
and which kept their initialisation, and is logged with the run.
"""

from __future__ import annotations

import logging
import math
import pickle
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from mlflow.exceptions import MlflowException
from torch import nn

from vidtx import storage
from vidtx.config import ConfigError, PipelineConfig
from vidtx.files import one_line
from vidtx.locations import location
from vidtx.models import VideoTransformer
from vidtx.models.heads import classifier_layer
from vidtx.models.mae import MaskedAutoencoder, decoder_state
from vidtx.nn import resize_pos_embed
from vidtx.tracking.runs import resolve_tracking_uri, sqlite_file
from vidtx.train.checkpoint import TrainedModel, trained_model

log = logging.getLogger(__name__)


@dataclass
class StartReport:
    """What `start_from` did."""

    source: str
    loaded: list[str]
    initialised: list[str]  # the tensors of this model that kept their initialisation
    classes: str  # how the class sets compared
    ignored: list[str] = field(default_factory=list)  # tensors of the source this model has no place for
    resized: list[str] = field(default_factory=list)  # position tables fitted to this model's sizes
    found: str | None = None  # what the source is, where it is no vidtx model (one line)
    recipe: str | None = None  # how the model fine-tunes from what it kept afresh
    decoder: list[str] = field(default_factory=list)  # a pretraining's decoder tensors taken from the source

    def text(self) -> str:
        lines = [f"found {self.found}"] if self.found else []
        lines += [f"initialised from {self.source}: {self.classes}"]
        lines += [self.recipe] if self.recipe else []
        lines += [f"loaded ({len(self.loaded)}):"]
        lines += [f"  {name}" for name in self.loaded]
        lines += [
            f"kept as initialised ({len(self.initialised)}):",
            *(f"  {name}" for name in self.initialised),
        ]
        if self.resized:
            lines += [f"resized ({len(self.resized)}):", *(f"  {name}" for name in self.resized)]
        if self.ignored:
            lines += [f"not used ({len(self.ignored)}):", *(f"  {name}" for name in self.ignored)]
        if self.decoder:
            lines += [f"decoder loaded ({len(self.decoder)}):", *(f"  {name}" for name in self.decoder)]
        return "\n".join(lines) + "\n"


def classifier_names(model: nn.Module, num_classes: int) -> list[str]:
    """The names of the classifier's tensors (`vidtx.models.heads.classifier_layer`)."""
    name, layer = classifier_layer(model, num_classes)
    return [f"{name}.{tensor}" for tensor, _ in layer.named_parameters()]


def start_from(
    model: VideoTransformer, source: TrainedModel, class_names: list[str], where: str
) -> StartReport:
    """Load `source`'s weights into `model`, which is to learn `class_names`; what was done."""
    weights = source.module.state_dict()
    target = model.state_dict()
    classifier = classifier_names(model, len(class_names) or model.num_classes)  # none: a pretraining
    if source.class_names is None:
        same = len(class_names) == next((len(weights[n]) for n in classifier if n in weights), 0)
        order = list(range(len(class_names))) if same else None
        classes = f"{'the same number of' if same else 'other'} classes (the source records no class names)"
    elif sorted(source.class_names) == sorted(class_names):
        order = [source.class_names.index(name) for name in class_names]
        classes = "the same classes: its classifier continues"
    else:
        order = None
        new = sorted(set(class_names) - set(source.class_names))
        classes = f"other classes (new: {', '.join(new) or 'none'}): a new classifier"
    if problems := incompatible(target, weights, model.FINE_TUNING_FRESH):
        raise ValueError(f"model.init_from {where}: {problems[0]}")
    loaded, initialised, resized = [], [], []
    with torch.no_grad():
        for name, tensor in target.items():
            incoming = weights.get(name)
            if name in classifier and incoming is not None and order is not None:
                incoming = incoming[order]  # (classes, ...) rows in this run's class order
            if incoming is not None and incoming.shape != tensor.shape and name in RESIZED:
                incoming = fitted(name, incoming, tensor.shape)
                resized.append(name)
            if incoming is None or incoming.shape != tensor.shape or (name in classifier and order is None):
                initialised.append(name)
                continue
            tensor.copy_(incoming)
            loaded.append(name)
    ignored = sorted(set(weights) - set(target))
    fresh = [name for name in initialised if name.startswith(model.FINE_TUNING_FRESH) and name in target]
    recipe = None
    if [name for name in fresh if not name.startswith("head.")]:
        recipe = f"{model.FINE_TUNING_RECIPE}: {', '.join(fresh)} start afresh"
        recipe += f"; the source's {', '.join(ignored)} not used" if ignored else ""
    return StartReport(where, loaded, initialised, classes, ignored, resized, source.found, recipe)


def start_decoder(model: MaskedAutoencoder, source: TrainedModel, where: str) -> list[str]:
    """A pretraining's decoder from `source` into `model` (checked by `check_starting_weights`); the
    tensors loaded (none where the source has no decoder: the decoder keeps its initialisation)."""
    if problems := decoder_problems(model, source):
        raise ValueError(f"model.init_from {where}: {problems[0]}")
    model.load_state_dict(source.decoder, strict=False)
    return sorted(source.decoder)


def attention_heads(module: nn.Module, blocks: str = "blocks") -> int | None:
    """The attention heads of `module`'s first block (of `blocks`), where it has one: what the tensors'
    shapes do not tell."""
    stack = getattr(module, blocks, None)
    return getattr(getattr(stack[0], "attn", None), "num_heads", None) if stack else None


def decoder_problems(model: MaskedAutoencoder, source: TrainedModel) -> list[str]:
    """Why `source`'s decoder cannot fill `model`'s (none where it has no decoder)."""
    if not (decoder := source.decoder):
        return []
    ours = attention_heads(model, "decoder_blocks")
    if source.decoder_heads and source.decoder_heads != ours:
        return [
            f"its decoder has {source.decoder_heads} attention heads, this one {ours} (pretrain.decoder_heads?)"
        ]
    target = decoder_state(model.state_dict())
    problems = [
        f"its decoder has no {name} (pretrain.decoder_depth?)" for name in target if name not in decoder
    ]
    problems += [
        f"its {name} has no place in this decoder (pretrain.decoder_depth?)"
        for name in decoder
        if name not in target
    ]
    return problems + [
        f"its {name} is {tuple(tensor.shape)}, this decoder's {tuple(target[name].shape)} "
        "(pretrain.decoder_width, pretrain.decoder_heads?)"
        for name, tensor in decoder.items()
        if name in target and tensor.shape != target[name].shape
    ]


RESIZED = ("pos_embed", "temporal_embed")  # position tables fitted to another crop size or frame count


def fitted(name: str, incoming: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A position table of the source resized to `shape`: `pos_embed` (1, 1 + n², D) to another square
    grid, `temporal_embed` (1, T, 1, D) to other time steps; ValueError when it cannot be."""
    if incoming.shape[-1] != shape[-1] or incoming.ndim != len(shape):
        raise ValueError(f"{name} {tuple(incoming.shape)} does not fit {tuple(shape)}")
    if name == "pos_embed":
        grid = math.isqrt(shape[1] - 1)
        if grid * grid != shape[1] - 1:
            raise ValueError(f"{name} {tuple(shape)} is no square grid")
        return resize_pos_embed(incoming, grid)
    steps = incoming[0, :, 0].T[None]  # (1, D, T)
    return F.interpolate(steps, size=shape[1], mode="linear", align_corners=False)[0].T[
        None, :, None
    ]  # (1, T', 1, D)


def incompatible(
    target: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], fresh: tuple[str, ...]
) -> list[str]:
    """Why the source's `weights` cannot start the model of `target` (its state dict): a tensor outside
    what the model starts afresh (`fresh`: name prefixes) that the source lacks, or shapes otherwise and
    is no position table that `fitted` resizes."""
    problems = []
    for name, tensor in target.items():
        if name.startswith(fresh):
            continue
        incoming = weights.get(name)
        if incoming is None:
            problems.append(f"the source has no {name} (another architecture?)")
        elif incoming.shape != tensor.shape and name not in RESIZED:
            problems.append(
                f"its {name} is {tuple(incoming.shape)}, this model's {tuple(tensor.shape)} (another size?)"
            )
        elif incoming.shape != tensor.shape:
            try:
                fitted(name, incoming, tensor.shape)
            except ValueError as err:
                problems.append(str(err))
    return problems


def readable_model(config: PipelineConfig, where: str, setting: str) -> TrainedModel:
    """The trained model `where` names (a registered model, a vidtx `.pt` file or a run's checkpoint),
    or ConfigError in one line naming `setting`: a registry that does not exist or lacks the model, a
    missing file or checkpoint, a file that is no checkpoint."""
    if where.startswith("models:/"):
        uri = resolve_tracking_uri(config)
        if (database := sqlite_file(uri)) is not None and not database.exists():
            raise ConfigError(f"{setting} {where}: no MLflow registry at {uri} (no such file)")
    elif not storage.exists(location(where)):
        raise ConfigError(f"{setting} {where}: no such file or checkpoint")
    try:
        return trained_model(config, where)
    except MlflowException as err:
        raise ConfigError(f"{setting} {where}: {err.message.strip().splitlines()[0]}") from None
    except (OSError, RuntimeError, ValueError, KeyError, pickle.UnpicklingError) as err:
        reason = (
            one_line(err) if isinstance(err, OSError) else str(err).strip().split(". ")[0].splitlines()[0]
        )
        raise ConfigError(f"{setting} {where}: not a checkpoint vidtx can read ({reason})") from None


def check_starting_weights(
    config: PipelineConfig, network: VideoTransformer, autoencoder: MaskedAutoencoder | None = None
) -> None:
    """ConfigError naming the setting, in one line, when `model.init_from` or `model.checkpoint` cannot
    start `network` (the model `config` builds, on the meta device; a pretraining's: `autoencoder`'s
    encoder, its decoder checked too): a registered model that does not exist, a missing file or
    checkpoint, a file that is no checkpoint, weights of another architecture or size. On the driver,
    before any Ray worker starts (it reads the source once more there); what was found is logged."""
    if (released := config.model.checkpoint) and not storage.is_file(released):
        raise ConfigError(f"model.checkpoint {released}: no such file")
    if not (where := config.model.init_from):
        return
    source = readable_model(config, where, "model.init_from")
    if source.found:
        log.info("model.init_from: found %s", source.found)
    network = autoencoder.encoder if autoencoder is not None else network
    problems = incompatible(network.state_dict(), source.module.state_dict(), network.FINE_TUNING_FRESH)
    theirs, ours = attention_heads(source.module), attention_heads(network)
    if not problems and theirs != ours:
        problems = [f"it has {theirs} attention heads, this model {ours} (model.options.num_heads?)"]
    if problems:
        raise ConfigError(f"model.init_from {where}: {problems[0]} (model.name={config.model.name})")
    if autoencoder is not None and (problems := decoder_problems(autoencoder, source)):
        raise ConfigError(f"model.init_from {where}: {problems[0]}")
