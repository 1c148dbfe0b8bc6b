"""Classification heads: a linear classifier, temporal averaging, and X-ViT's temporal attention; and
which layer of a model's head is its classifier (`classifier_layer`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vidtx.nn import AttentionImpl, TransformerBlock


class ClassifierHead(nn.Module):
    """Dropout then a linear classifier: (B, D) -> (B, K).

    Args:
        dim: Feature width D.
        num_classes: Number of output logits K.
        dropout: Dropout rate on the features before the linear layer (0 = off).
    """

    def __init__(self, dim: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, features: Tensor) -> Tensor:
        return self.fc(self.drop(features))


class TemporalAverageHead(ClassifierHead):
    """Average the per-frame features over time, then classify: (B, T, D) -> (B, K).

    The classifier is linear, so this equals averaging per-frame logits (TSN's consensus).
    Takes `ClassifierHead`'s arguments (dim, num_classes, dropout).
    """

    def forward(self, features: Tensor) -> Tensor:
        return super().forward(features.mean(dim=1))


class TemporalAttentionHead(nn.Module):
    """X-ViT's temporal-attention (TA) head: a learned token attends [token; z_1 .. z_T] through
    `depth` transformer layers, then LN -> Linear -> GELU -> Dropout -> Linear: (B, T, D) -> (B, K).

    As in the official code there is no temporal position here (the backbone's temporal embedding
    and the space-time mixing carry the order), qkv has no bias, the norms use eps 1e-5 and the
    token starts at zero.

    Args:
        dim: Feature width D of the per-frame features (and of the hidden layer).
        num_heads: Attention heads of the temporal transformer layers; must divide `dim`.
        num_classes: Number of output logits K.
        depth: Number of transformer layers over [token; z_1 .. z_T].
        dropout: Dropout rate between the GELU and the last linear layer (0 = off).
        attention_impl: "auto" / "sdpa" (torch's fused kernel) or "math" (explicit softmax).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        num_classes: int,
        *,
        depth: int = 1,
        dropout: float = 0.0,
        attention_impl: AttentionImpl = "auto",
    ) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.Sequential(
            *(
                TransformerBlock(dim, num_heads, qkv_bias=False, norm_eps=1e-5, attention_impl=attention_impl)
                for _ in range(depth)
            )
        )
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim)
        self.act = nn.GELU()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(dim, num_classes)

    def forward(self, features: Tensor) -> Tensor:
        token = self.cls_token.expand(features.shape[0], -1, -1)  # (B, 1, D)
        z = self.blocks(torch.cat([token, features], dim=1))  # (B, 1 + T, D)
        return self.fc2(self.drop(self.act(self.fc1(self.norm(z[:, 0])))))


def classifier_layer(model: nn.Module, num_classes: int) -> tuple[str, nn.Linear]:
    """The name and module of the classifier of `model`'s head: its last linear layer with one output
    per class (`head.fc` of the classifier heads, `head.fc2` of the temporal-attention head). Its
    input is the model's pre-logits embedding."""
    for name, module in reversed(list(model.named_modules())):
        if name.startswith("head") and isinstance(module, nn.Linear) and module.out_features == num_classes:
            return name, module
    raise ValueError(f"{type(model).__name__} has no linear layer with {num_classes} outputs in its head")
