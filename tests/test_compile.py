"""`train.compile`: torch.compile of the model inside its DeepSpeed engine, the way DeepSpeed compiles
(`engine.compile`). The engines are real (one rank over gloo); the backend is aot_eager, which runs
dynamo's graph capture and AOT autograd as inductor does, without inductor's minutes of C++ compiling
on CPUs (`benchmarks/training_knobs.py` measures inductor)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from engines import trained_weights

from vidtx.config import CompileConfig, ConfigError, TrainConfig, load_config
from vidtx.train.compilation import compile_engine, warn_about_graph_breaks

LOGGER = "vidtx.train.compilation"


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_compiled_engine_trains_as_the_eager_one_does(
    single_process_group: None, tmp_path: Path, stage: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Three steps of X-ViT (its in-place channel shift is one autograd node) on ZeRO 0-2 (3 is
    refused), fp32: the compiled engine's losses and weights are the eager engine's within float
    tolerance, and the model compiles without a graph break."""
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=stage, precision="fp32", max_steps=3)
    eager = trained_weights("xvit_tiny", train, 3, tmp_path / "eager")
    compiled_config = train.model_copy(update={"compile": CompileConfig(enabled=True, backend="aot_eager")})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        compiled = trained_weights("xvit_tiny", compiled_config, 3, tmp_path / "compiled")
        breaks = warn_about_graph_breaks()
    assert "the model is compiled with torch.compile (backend aot_eager" in caplog.text
    assert compiled[0] == pytest.approx(eager[0], rel=1e-5)
    for name, weight in eager[1].items():
        torch.testing.assert_close(compiled[1][name], weight, rtol=1e-4, atol=1e-5, msg=name)
    assert breaks == {}


def test_compiling_a_zero_3_engine_is_refused_at_the_start_naming_the_field() -> None:
    """Compiled, a ZeRO-3 engine's first step did not end within 15 minutes (dynamo and the
    parameter gathers' hooks): the config refuses it before anything starts."""
    with pytest.raises(
        ConfigError, match=r"--set train\.compile\.enabled=true: train\.compile: torch\.compile of a ZeRO-3"
    ):
        load_config(None, ["train.zero_stage=3", "train.compile.enabled=true"])
    assert load_config(None, ["train.zero_stage=2", "train.compile.enabled=true"]).train.compile.enabled


def test_a_backend_torch_does_not_have_is_a_warning_naming_it_and_the_model_runs_eager(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Engine:  # what `compile_engine` calls of a DeepSpeed engine
        compiled = False

        def compile(self, **kwargs: object) -> None:
            self.compiled = True

    engine = Engine()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not compile_engine(engine, CompileConfig(enabled=True, backend="no_such_backend"))
    assert not engine.compiled
    (message,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert message.startswith("train.compile.backend 'no_such_backend' is not a torch.compile backend here")
    assert "inductor" in message
    assert message.endswith("the model runs eager")


def test_every_graph_break_is_a_warning_naming_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    class Engine:
        def compile(self, backend: str, compile_kwargs: dict) -> None:
            self.module = torch.compile(breaking, backend=backend, **compile_kwargs)

    def breaking(x: torch.Tensor) -> torch.Tensor:
        x = x * 2
        torch._dynamo.graph_break()  # what a call dynamo cannot trace does
        return x + 1

    engine = Engine()
    compile_engine(engine, CompileConfig(enabled=True, backend="eager"))
    assert torch.equal(engine.module(torch.ones(2)), torch.full((2,), 3.0))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        breaks = warn_about_graph_breaks()
    assert sum(breaks.values()) >= 1
    # warnings only: the compile's INFO line is captured too where an earlier test of the process
    # set vidtx's loggers to INFO (as the CLI does)
    (message,) = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert message.startswith("torch.compile: the model's graph breaks ")
    assert "graph_break" in message or "Call to" in message, message
