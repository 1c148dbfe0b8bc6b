"""Activation checkpointing (`train.activation_checkpointing`): every model of the zoo, X-ViT's in-place
channel shift included, gets the gradients it gets without it, and keeps fewer activations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engines import trained_weights

from vidtx.config import TrainConfig
from vidtx.models import create_model, list_models

TINY = [name for name in list_models() if name.endswith("_tiny")]


def gradients(name: str, every: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and parameter gradients of one forward + backward in fp32, dropout and stochastic depth on
    (the recomputed forward must draw what the first one drew)."""
    torch.manual_seed(0)
    model = create_model(name, drop_path_rate=0.2, head_dropout=0.3)
    model.set_activation_checkpointing(every)
    clips = torch.randn(2, 3, model.num_frames, model.img_size, model.img_size)
    torch.manual_seed(1)
    loss = torch.nn.functional.cross_entropy(model(clips), torch.tensor([0, 1]))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("every", [1, 2])
@pytest.mark.parametrize("name", TINY)
def test_checkpointed_blocks_give_the_gradients_of_the_plain_forward(name: str, every: int) -> None:
    plain_loss, plain = gradients(name, 0)
    loss, checkpointed = gradients(name, every)
    assert loss == plain_loss
    assert checkpointed.keys() == plain.keys()
    for parameter, grad in plain.items():
        torch.testing.assert_close(checkpointed[parameter], grad, rtol=0, atol=1e-6, msg=parameter)


def test_checkpointing_keeps_fewer_activations_for_the_backward() -> None:
    """What autograd saves for the backward pass, counted by its saved-tensor hooks: every block
    checkpointed keeps only the blocks' inputs."""

    def saved_bytes(every: int) -> int:
        model = create_model("xvit_tiny")
        model.set_activation_checkpointing(every)
        clips = torch.randn(2, 3, model.num_frames, model.img_size, model.img_size)
        total = 0

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            nonlocal total
            total += tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = model(clips).sum()  # what the forward keeps for the backward
        loss.backward()
        return total

    plain, every_block, every_other = saved_bytes(0), saved_bytes(1), saved_bytes(2)
    assert every_block < every_other < plain
    assert every_block < 0.4 * plain


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="activation checkpointing every -1 blocks"):
        create_model("xvit_tiny").set_activation_checkpointing(-1)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_deepspeed_engine_trains_checkpointed_as_it_trains_without(
    single_process_group: None, tmp_path: Path, stage: int
) -> None:
    """On a real DeepSpeed engine of each ZeRO stage (fp32), two steps of X-ViT with every block
    checkpointed: the losses and the weights after them are those of the run without."""
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=stage, precision="fp32", max_steps=2)
    plain = trained_weights("xvit_tiny", train, 2, tmp_path / "plain")
    every_block = train.model_copy(update={"activation_checkpointing": 1})
    checkpointed = trained_weights("xvit_tiny", every_block, 2, tmp_path / "checkpointed")
    assert checkpointed[0] == pytest.approx(plain[0], rel=0, abs=1e-6)
    for name, weight in plain[1].items():
        torch.testing.assert_close(checkpointed[1][name], weight, rtol=0, atol=1e-6, msg=name)
