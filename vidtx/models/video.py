"""The contract every video model in the zoo follows: clips (B, C, T, H, W) -> logits (B, num_classes)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from vidtx.models.vit import ViTEncoder


class VideoTransformer(ViTEncoder):
    """A ViT trunk plus `forward_features` (subclass) and `head`; checks the clip shape.

    `forward` accepts only clips (B, C, num_frames, img_size, img_size).

    Args:
        num_classes: Number of output logits K.
        num_frames: Frames per input clip T; a multiple of `tubelet_size`.
        head_dropout: Dropout rate before the head's last linear layer; stored for the subclass's head.
        **encoder_kwargs: Passed to `ViTEncoder` (img_size, patch_size, embed_dim, depth,
            tubelet_size, init_std, ...).
    """

    head: nn.Module  # set by subclasses: features -> logits
    MASKINGS: tuple[str, ...] = ()  # the masks `encode_visible` takes (a masked autoencoder's encoder)
    # options of the encoder a masked autoencoder pretrains (VideoMAE's ViT: its final norm)
    PRETRAINING_OPTIONS: ClassVar[dict[str, Any]] = {}
    # what a fine-tune starts afresh rather than take from its source (`model.init_from`)
    FINE_TUNING_FRESH: tuple[str, ...] = ("head.",)
    FINE_TUNING_RECIPE = "a new classifier"  # what starting those afresh is, in the words of the report

    def __init__(
        self, *, num_classes: int = 400, num_frames: int = 8, head_dropout: float = 0.0, **encoder_kwargs: Any
    ) -> None:
        super().__init__(**encoder_kwargs)
        if num_frames % self.tubelet_size:
            raise ValueError(f"num_frames {num_frames} is not a multiple of tubelet_size {self.tubelet_size}")
        self.num_classes = num_classes
        self.num_frames = num_frames
        self.head_dropout = head_dropout

    @property
    def token_frames(self) -> int:
        """Time steps after embedding: T / tubelet_size."""
        return self.num_frames // self.tubelet_size

    def forward_features(self, clips: Tensor) -> Tensor:
        raise NotImplementedError

    def encode_visible(self, clips: Tensor, visible: Tensor) -> Tensor:
        """Features (B, K, D) of the visible patches `visible` (B, K) of the T'·N tokens, the others
        never encoded: what a masked autoencoder's encoder runs (models with `MASKINGS`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot encode visible tokens only")

    def forward(self, clips: Tensor) -> Tensor:
        expected = (self.num_frames, self.img_size, self.img_size)
        if clips.dim() != 5 or tuple(clips.shape[2:]) != expected:
            raise ValueError(
                f"expected clips (B, C, {expected[0]}, {expected[1]}, {expected[2]}), got {tuple(clips.shape)}"
            )
        return self.head(self.forward_features(clips))
