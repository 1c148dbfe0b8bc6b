"""FLOPs in the convention of the video papers: multiply-accumulates (MACs), as fvcore counts them.

The count is measured, not derived from a formula: the model runs under `torch.utils.flop_counter`
(which counts 2 FLOPs per multiply-add of matmuls, convolutions and attention) and the result is
halved. It runs on the meta device: no memory, no compute, and attention is counted (on real CPU
tensors torch's counter sees the fused CPU SDPA kernel as 0 FLOPs, while on meta tensors SDPA
decomposes into the batched matmuls it consists of). Norms, softmax and element-wise ops are not
counted, as in fvcore's matmul/conv counts (they are well under 1% of a ViT).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# In these models batched matmuls occur only inside attention (QKᵀ and AV); linear layers and patch
# embeddings count as mm / addmm / convolution.
_ATTENTION_OPERATORS = ("aten.bmm", "aten.baddbmm", "scaled_dot_product")


@dataclass(frozen=True)
class FlopCount:
    """MACs of one forward pass, by aten operator."""

    by_operator: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_operator.values())

    @property
    def attention(self) -> int:
        """MACs of the attention products QKᵀ and AV."""
        return sum(
            macs for name, macs in self.by_operator.items() if any(op in name for op in _ATTENTION_OPERATORS)
        )

    @property
    def gflops(self) -> float:
        """Total in GFLOPs as the papers write it (giga multiply-adds)."""
        return self.total / 1e9


def count_flops(model: nn.Module, input_shape: Sequence[int]) -> FlopCount:
    """Count the MACs of `model(torch.empty(input_shape))`, in eval mode, on the meta device.

    The model itself is not moved: its parameters are swapped for meta copies for the call, so a
    model on any device, in any dtype (or already on meta) can be measured; parameters must have their
    full shapes (count before ZeRO-3 partitions them). Include the batch in `input_shape`:
    (1, C, T, H, W) gives the cost per view.
    """
    tensors = itertools.chain(model.named_parameters(), model.named_buffers())
    meta_state = {name: tensor.to("meta") for name, tensor in tensors}
    dtype = next((t.dtype for t in meta_state.values() if t.is_floating_point()), torch.float32)
    inputs = torch.empty(tuple(input_shape), dtype=dtype, device="meta")  # in the model's dtype (bf16 too)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            torch.func.functional_call(model, meta_state, (inputs,))
    finally:
        model.train(was_training)
    flops = counter.get_flop_counts()["Global"]
    return FlopCount({str(operator): count // 2 for operator, count in flops.items()})
