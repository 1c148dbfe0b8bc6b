"""The per-worker training loop: runs inside every Ray Train worker.

Each worker builds the model from the registry, the rank-aware webdataset loader and a DeepSpeed
engine, resumes from the latest Ray checkpoint if there is one, then trains for `train.max_steps`
optimizer steps with periodic validation and checkpoints. Rank 0 logs to the run's MLflow run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import ray.train
import torch
import torch.distributed as dist

from vidtx.clips.normalize import normalize_clips
from vidtx.data.train_loader import TrainBatch, build_train_loader
from vidtx.models import count_flops
from vidtx.models.mae import MaskedAutoencoder
from vidtx.tracking.rank_zero import RankZeroMetrics
from vidtx.train.checkpoint import TrainState, restore, save_and_report, trained_model
from vidtx.train.compilation import warn_about_graph_breaks
from vidtx.train.ema import WeightAverage
from vidtx.train.engine import build_engine
from vidtx.train.objectives import MaskedAutoencoding, objective_type
from vidtx.train.payload import WorkerPayload
from vidtx.train.profiling import StepProfiler
from vidtx.train.sample_log import SampleLog
from vidtx.train.starting_weights import StartReport, start_decoder, start_from
from vidtx.train.throughput import ThroughputMeter, format_duration

logger = logging.getLogger("vidtx.train")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def train_loop_per_worker(payload: dict[str, Any]) -> None:
    """Ray Train entry point: `payload` is a `WorkerPayload` as JSON-compatible data."""
    logging.getLogger("vidtx").setLevel(logging.INFO)  # Ray's worker log handler prints it
    WorkerTrainer(WorkerPayload.model_validate(payload)).fit()


class WorkerTrainer:
    def __init__(self, payload: WorkerPayload) -> None:
        self.cfg = payload.config
        self.validation = payload.validation  # False: the shards have no validation split
        context = ray.train.get_context()
        self.rank, self.world_size = context.get_world_rank(), context.get_world_size()
        logger.info(
            "rank %d/%d on node %s", self.rank, self.world_size, ray.get_runtime_context().get_node_id()
        )
        train, data = self.cfg.train, self.cfg.data
        torch.manual_seed(train.seed)  # identical initial weights on every rank
        self.loader = build_train_loader(
            data,
            batch_size=train.micro_batch_size,
            seed=train.seed,
            multi_label=self.cfg.model.task == "multi_label",
        )
        self.class_names = self.loader.data.class_names  # the sources' labels merged by name
        self.objective = objective_type(payload.objective, self.cfg)(self.cfg, self.loader.data)
        model = self.objective.model()
        started = self._start_from(model) if self.cfg.model.init_from else None
        # For MFU only, where a peak is given: counted before DeepSpeed wraps the model (ZeRO-3
        # partitions the parameters). Forward + backward = 3 forwards; a MAC is 2 FLOPs. (Not for a
        # masked autoencoder: its encoder's cost depends on the mask.)
        peak = train.peak_tflops * 1e12 if train.peak_tflops and torch.cuda.is_available() else None
        flops = None
        if peak is not None and not isinstance(model, MaskedAutoencoder):
            flops = 3 * 2 * count_flops(model, (1, 3, data.num_frames, data.crop_size, data.crop_size)).total
        built = build_engine(model, train)
        self.engine, self.group_names = built.engine, built.group_names
        self.ema = WeightAverage(self.engine.module, train.ema) if train.ema else None
        self.dtype = DTYPES[train.precision]
        self.clips_per_step = train.micro_batch_size * train.gradient_accumulation_steps * self.world_size

        restored = restore(self.engine, self.ema)
        self.state = restored or TrainState()
        if restored:
            self._resume_data()
            logger.info("rank %d resumed at step %d, epoch %d", self.rank, self.state.step, self.loader.epoch)
        torch.manual_seed(train.seed + 1000 * self.rank + self.state.step)  # dropout / drop path
        self.rng = np.random.default_rng([train.seed, self.rank, self.state.step])  # batch mixing
        self.metrics = RankZeroMetrics(self.rank, payload.tracking_uri, payload.mlflow_run_id)
        self.sample_log = SampleLog(train.sample_log, self.rank)
        if not restored:  # what the run trains, logged once
            self.metrics.log_text(built.groups_table, "param_groups.md")
            if started is not None:
                self.metrics.log_text(started.text(), "init_from.txt")
        if self.rank == 0:
            logger.info("parameter groups:\n%s", built.groups_table)
        if restored:
            self.metrics.log_always({"train/resumed_from_step": float(self.state.step)}, self.state.step)
        self.meter = ThroughputMeter(self.world_size, flops, peak)
        self.profiler = StepProfiler(
            train.profile_steps, self.rank == 0, lambda folder: self.metrics.log_artifacts(folder, "profile")
        )

    def _start_from(self, model: torch.nn.Module) -> StartReport:
        """`model.init_from`'s weights into `model` (a resumed run then loads its own checkpoint): a
        masked autoencoder's encoder, and its decoder where the source has one."""
        where = self.cfg.model.init_from
        source = trained_model(self.cfg, where)
        network = model.encoder if isinstance(model, MaskedAutoencoder) else model
        report = start_from(network, source, self.class_names, where)
        if isinstance(model, MaskedAutoencoder):
            report.decoder = start_decoder(model, source, where)
        if self.rank == 0:
            logger.info(
                "%s; %d tensors loaded, %d kept as initialised: %s%s",
                report.classes,
                len(report.loaded),
                len(report.initialised),
                ", ".join(report.initialised) or "none",
                f"; the decoder's {len(report.decoder)} tensors loaded" if report.decoder else "",
            )
        return report

    # ----------------------------------------------------------------------------------------------

    def _resume_data(self) -> None:
        """The loader goes on from this rank's place in the checkpoint's epoch; a checkpoint of a
        different world size, or of a vidtx that kept no place, resumes with the next epoch."""
        if self.rank < len(self.state.data) and len(self.state.data) == self.world_size:
            self.loader.load_state_dict(self.state.data[self.rank])
            return
        logger.warning(
            "rank %d: the checkpoint keeps no place in epoch %d for %d ranks (it has %d): going on with epoch %d",
            self.rank,
            self.state.epoch,
            self.world_size,
            len(self.state.data),
            self.state.epoch + 1,
        )
        self.loader.start_epoch(self.state.epoch + 1)

    def _batches(self) -> Iterator[TrainBatch]:
        """Training batches across epochs, from where the loader stands."""
        while True:
            empty = True
            for batch in self.loader:
                empty = False
                yield batch
            if empty:
                where = ", ".join(str(source.shards) for source in self.cfg.data.training_sources())
                raise RuntimeError(f"no training clips could be loaded from {where}")

    def _data_places(self) -> list[dict[str, Any]]:
        """Collective: every rank's place in its epoch, by rank (what a checkpoint keeps)."""
        places: list[Any] = [None] * self.world_size
        dist.all_gather_object(places, self.loader.state_dict())
        return places

    def _to_model(self, clips: torch.Tensor) -> torch.Tensor:
        """uint8 clips (B, T, H, W, C) from the loader -> normalised (B, C, T, H, W) on the device."""
        data = self.cfg.data
        clips = clips.to(self.engine.device, non_blocking=True)
        return normalize_clips(clips, data.mean, data.std, self.dtype)

    def _micro_step(self, clips: torch.Tensor, labels: torch.Tensor) -> float:
        self.clips = self._to_model(clips)  # kept for the step's reconstruction image
        labels = labels.to(self.engine.device, non_blocking=True)
        loss = self.objective.loss(self.engine, self.clips, labels, self.rng)
        self.engine.backward(loss)
        self.engine.step()  # applies the update at the gradient-accumulation boundary only
        return loss.item()

    def _over_ranks(self, values: list[float], op: dist.ReduceOp.RedOpType) -> list[float]:
        """`values` reduced over the ranks by `op` (SUM is returned as the mean)."""
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=op)
        return (tensor / self.world_size if op == dist.ReduceOp.SUM else tensor).tolist()

    # ----------------------------------------------------------------------------------------------

    def fit(self) -> None:
        train = self.cfg.train
        batches = self._batches()
        self.engine.train()
        losses: list[float] = []
        first_step = self.state.step
        try:
            while self.state.step < train.max_steps:
                self.profiler.step_starts(self.state.step + 1)
                for _ in range(train.gradient_accumulation_steps):
                    asked = time.perf_counter()
                    clips, labels, keys = next(batches)
                    self.meter.waited(time.perf_counter() - asked)
                    self.sample_log.write(self.state.step + 1, keys)
                    losses.append(self._micro_step(clips, labels))
                if self.ema is not None:
                    self.ema.update()
                self.state.step += 1
                if self.state.step == first_step + 1 and train.compile.enabled:
                    warn_about_graph_breaks()  # the first step compiled the model
                self.state.samples_seen += self.clips_per_step
                self.meter.update(self.clips_per_step)
                step = self.state.step
                self.profiler.step_ends(step)
                if step % train.log_every == 0 or step == train.max_steps:
                    self._log_progress(losses)
                    losses = []
                is_checkpoint = step % train.checkpoint_every == 0 or step == train.max_steps
                report: dict[str, float] = {"step": step}
                if self.validation and (is_checkpoint or step % train.val_every == 0):
                    report |= self._validate_and_log(step)
                if self._pictures_at(step):
                    picture = self.objective.picture(self.engine, self.clips)  # collective
                    self.metrics.log_image(picture, f"reconstructions/step-{step:08d}.png")
                if is_checkpoint:
                    self.state.best_top1 = max(self.state.best_top1, report.get("val_top1", -1.0))
                    self.state.epoch, self.state.data = self.loader.epoch, self._data_places()
                    pretrained = self.cfg if isinstance(self.objective, MaskedAutoencoding) else None
                    save_and_report(
                        self.engine,
                        self.state,
                        report,
                        self.class_names,
                        self.group_names,
                        self.ema,
                        pretrained,
                    )
        finally:
            self.metrics.close()
            self.sample_log.close()

    def _validate_and_log(self, step: int) -> dict[str, float]:
        """Validate the weights and their average (if kept), log both, and return what a checkpoint
        report carries: Ray keeps the best by the top-1 of the weights `eval.weights` evaluates."""
        objective = self.objective
        passes = {"val": objective.validate(self.engine, self._to_model, self.class_names)}
        if self.ema is not None:
            with self.ema.swapped_in():
                passes["val_ema"] = objective.validate(self.engine, self._to_model, self.class_names)
        for prefix, results in passes.items():
            self.metrics.log({f"{prefix}/{name}": value for name, value in results.items()}, step)
        average = f" (average: {objective.summary(passes['val_ema'])})" if "val_ema" in passes else ""
        logger.info("step %d validation %s%s", step, objective.summary(passes["val"]), average)
        chosen = passes["val_ema" if "val_ema" in passes and self.cfg.eval.weights != "raw" else "val"]
        return objective.report(chosen)

    def _pictures_at(self, step: int) -> bool:
        """Whether the reconstruction image is logged at `step` (pretraining only)."""
        if not isinstance(self.objective, MaskedAutoencoding):
            return False
        every = self.cfg.pretrain.image_every
        return step == self.cfg.train.max_steps or (every > 0 and step % every == 0)

    def _log_progress(self, losses: list[float]) -> None:
        train = self.cfg.train
        rates = self.meter.lap()
        loss, data_wait = self._over_ranks([float(np.mean(losses)), rates["data_wait"]], dist.ReduceOp.SUM)
        (slowest_wait,) = self._over_ranks([rates["data_wait"]], dist.ReduceOp.MAX)
        metrics = {
            "train/loss": loss,
            "train/data_wait": data_wait,  # mean over ranks of the wall time spent waiting for batches
            "train/data_wait_max": slowest_wait,
            "train/lr": self.engine.get_lr()[0],
            "train/clips_per_second": rates["clips_per_second"],
            "train/samples_seen": float(self.state.samples_seen),
            "train/epoch": float(self.loader.epoch),
        }
        if (grad_norm := self.engine.get_global_grad_norm()) is not None:
            metrics["train/grad_norm"] = float(grad_norm)
        if train.precision == "fp16":
            metrics["train/loss_scale"] = float(self.engine.optimizer.cur_scale)
        if "mfu" in rates:
            metrics["train/mfu"] = rates["mfu"]
        self.metrics.log(metrics, self.state.step)
        if self.rank == 0:
            eta = self.meter.eta_seconds(train.max_steps - self.state.step, self.clips_per_step)
            logger.info(
                "step %d/%d loss %.4f lr %.3g %.1f clips/s data wait %.0f%%%s eta %s",
                self.state.step,
                train.max_steps,
                loss,
                metrics["train/lr"],
                rates["clips_per_second"],
                100 * data_wait,
                f" mfu {rates['mfu']:.1%}" if "mfu" in rates else "",
                format_duration(eta),
            )
