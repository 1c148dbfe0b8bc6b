"""What a training run learns: the one loop (`vidtx.train.loop`) with one of three objectives.

- `Classification` (`vidtx train`): the zoo's network, batch mixing (mixup, CutMix) and cross-entropy
  on the labels (focal and weighted per class as `train.loss` and `train.class_weights` say);
  validation reports top-1, top-5 and loss, and the best checkpoint is the best top-1.
- `MultiLabelClassification` (`vidtx train` with `model.task: multi_label`): the same network with a
  sigmoid per class, binary cross entropy on the label sets (mixing blends their vectors); validation
  reports mAP (`vidtx.eval.multilabel`) and loss, and the best checkpoint is the best mAP.
- `MaskedAutoencoding` (`vidtx pretrain`): the network as the encoder of a masked autoencoder
  (`vidtx.models.mae`); labels are ignored; the loss is the reconstruction error of the hidden tokens;
  validation reports that error on the validation split under masks drawn from a fixed seed (so two
  checkpoints are compared on the same masks), and the best checkpoint is the lowest. Every
  `pretrain.image_every` steps (and at the last) rank 0 logs an image of one clip's frames: original,
  masked, reconstructed.

Checkpointing, resume, EMA, DeepSpeed, compilation, activation checkpointing and MLflow are the loop's
and serve both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from vidtx.config import PipelineConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.data.training_data import TrainingData
from vidtx.model_factory import masked_autoencoder, model_for
from vidtx.models.mae import MaskedAutoencoder
from vidtx.models.masking import sample_mask
from vidtx.train.loss import (
    BatchMix,
    balanced_class_weights,
    classification_loss,
    mix_batch,
    multilabel_loss,
    smoothed_targets,
)
from vidtx.train.validation import validate

ObjectiveName = Literal["classification", "masked_autoencoding"]
ToModel = Callable[[torch.Tensor], torch.Tensor]  # the loader's uint8 clips -> the model's input
VALIDATION_MASK_SEED = 0


class Classification:
    """Supervised classification of the clips' labels (see the module docstring)."""

    score = ("val_top1", "max")  # the report's metric that picks the best checkpoint, and its order
    multi_label = False

    def __init__(self, config: PipelineConfig, data: TrainingData) -> None:
        self.config, self.num_classes = config, len(data.class_names)
        self.mix = BatchMix.from_config(config.train)
        self.class_weights = (
            balanced_class_weights(torch.from_numpy(data.class_frequencies()).float())
            if config.train.class_weights == "balanced"
            else None
        )

    def model(self) -> nn.Module:
        return model_for(self.config, num_classes=self.num_classes)

    def targets(
        self, clips: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The clips as trained on and their targets: labels (B,) or label sets (B, K) as they are, or
        mixed (`train.mixup_alpha`, `train.cutmix_alpha`) into soft rows (B, K)."""
        if not self.mix.enabled:
            return clips, labels
        return mix_batch(clips, labels, self.num_classes, self.mix, self.config.train.label_smoothing, rng)

    def loss(
        self, engine: Any, clips: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> torch.Tensor:
        train = self.config.train
        clips, targets = self.targets(clips, labels, rng)
        gamma = train.focal_gamma if train.loss == "focal" else 0.0
        return classification_loss(
            engine(clips), targets, train.label_smoothing, class_weights=self.class_weights, focal_gamma=gamma
        )

    def validate(self, engine: Any, to_model: ToModel, class_names: Sequence[str]) -> dict[str, float]:
        train, data = self.config.train, self.config.data
        return validate(
            engine,
            data,
            train.micro_batch_size,
            train.val_max_batches,
            to_model,
            class_names,
            self.multi_label,
        )

    @staticmethod
    def summary(results: dict[str, float]) -> str:
        return f"top-1 {results['top1']:.3f} top-5 {results['top5']:.3f}"

    @staticmethod
    def report(results: dict[str, float]) -> dict[str, float]:
        return {"val_top1": results["top1"], "val_loss": results["loss"]}


class MultiLabelClassification(Classification):
    """Supervised classification of the clips' label sets (see the module docstring)."""

    score = ("val_map", "max")
    multi_label = True

    def loss(
        self, engine: Any, clips: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> torch.Tensor:
        clips, targets = self.targets(clips, labels, rng)
        if not self.mix.enabled:  # mixed rows are smoothed already
            targets = smoothed_targets(targets, self.num_classes, self.config.train.label_smoothing)
        return multilabel_loss(engine(clips), targets)

    @staticmethod
    def summary(results: dict[str, float]) -> str:
        return f"mAP {results['mean_ap']:.3f}"

    @staticmethod
    def report(results: dict[str, float]) -> dict[str, float]:
        return {"val_map": results["mean_ap"], "val_loss": results["loss"]}


class MaskedAutoencoding:
    """Masked-autoencoder pretraining (see the module docstring)."""

    score = ("val_loss", "min")

    def __init__(self, config: PipelineConfig, data: TrainingData) -> None:
        self.config = config

    def model(self) -> nn.Module:
        return masked_autoencoder(self.config)

    def loss(
        self, engine: Any, clips: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> torch.Tensor:
        return engine(clips).loss

    @torch.no_grad()
    def validate(self, engine: Any, to_model: ToModel, class_names: Sequence[str]) -> dict[str, float]:
        """The reconstruction loss over the validation split (the ranks' shares summed), each batch's
        masks drawn from a generator seeded the same at every validation."""
        train, data = self.config.train, self.config.data
        loader = iter(build_eval_loader(data, data.val_split, batch_size=train.micro_batch_size))
        model: MaskedAutoencoder = engine.module
        generator = torch.Generator().manual_seed(VALIDATION_MASK_SEED + dist.get_rank())
        totals = torch.zeros(2, dtype=torch.float64)  # loss sum, clips
        engine.eval()
        for _ in range(train.val_max_batches or 10**12):
            batch = next(loader, None)
            active = torch.tensor([batch is not None], dtype=torch.int64)
            dist.all_reduce(active)  # every rank runs a forward while any has a batch (ZeRO-3's gathers)
            if not active.item():
                break
            views = (
                batch[0]
                if batch is not None
                else torch.zeros(
                    (1, 1, data.num_frames, data.crop_size, data.crop_size, 3), dtype=torch.uint8
                )
            )
            clips = to_model(views[:, 0])  # (B, C, T, H, W)
            mask = sample_mask(
                len(clips), model.steps, model.patches, model.mask_ratio, model.masking, generator
            )
            loss = engine(clips, mask.to(clips.device)).loss.float().item()
            if batch is not None:
                totals += torch.tensor([loss * len(clips), len(clips)], dtype=torch.float64)
        engine.train()
        dist.all_reduce(totals)
        loss_sum, clips_seen = totals.tolist()
        return {"loss": loss_sum / max(clips_seen, 1.0), "clips": clips_seen}

    @torch.no_grad()
    def picture(self, engine: Any, clips: torch.Tensor) -> np.ndarray:
        """Collective (every rank runs the forward): the first clip's frames as three rows, original,
        masked (hidden patches black) and reconstructed (hidden patches predicted, per-patch normalised
        predictions put back at the original patch's mean and spread): uint8 (3·H, T'·W, 3), one
        frame per time step."""
        model: MaskedAutoencoder = engine.module
        clip = clips[:1]  # (1, C, T, H, W), normalised
        generator = torch.Generator().manual_seed(VALIDATION_MASK_SEED)
        mask = sample_mask(1, model.steps, model.patches, model.mask_ratio, model.masking, generator)
        mask = mask.to(clip.device)
        engine.eval()
        predicted = model.predicted_pixels(engine(clip, mask).pixels, clip)  # (1, T'·N, P) in [0, 1]
        engine.train()
        original = model.pixels(clip)  # (1, T'·N, P) in [0, 1]
        hidden = mask[..., None]
        rows = [original, original.masked_fill(hidden, 0.0), torch.where(hidden, predicted, original)]
        frames = []
        for row in rows:
            video = model.unpatchify(row)[0].clamp(0, 1)[:, :: model.tubelet]  # (C, T', H, W): a frame a step
            frames.append(torch.cat(list(video.permute(1, 2, 3, 0)), dim=1))  # (H, T'·W, C)
        return (torch.cat(frames, dim=0) * 255).round().to(torch.uint8).cpu().numpy()

    @staticmethod
    def summary(results: dict[str, float]) -> str:
        return f"reconstruction loss {results['loss']:.4f}"

    @staticmethod
    def report(results: dict[str, float]) -> dict[str, float]:
        return {"val_loss": results["loss"]}


Objective = Classification | MultiLabelClassification | MaskedAutoencoding


def objective_type(name: ObjectiveName, config: PipelineConfig) -> type[Objective]:
    """The objective a run of `name` learns: a classification's depends on `model.task`."""
    if name == "masked_autoencoding":
        return MaskedAutoencoding
    return MultiLabelClassification if config.model.task == "multi_label" else Classification
