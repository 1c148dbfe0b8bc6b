"""`pretrain`: self-supervised pretraining of `model`'s network as a masked autoencoder (VideoMAE)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from vidtx.config.base import StrictModel

Masking = Literal["tube", "random"]
# what a training run learns (`vidtx.train.objectives`): its labels, or the clips themselves (pretraining)
Objective = Literal["classification", "masked_autoencoding"]


class PretrainConfig(StrictModel):
    """`pretrain`: masked-autoencoder pretraining (`vidtx pretrain`, the `pretrain-model` flow).

    Read by the pretraining stage: the network of `model` is the encoder, trained with `train`'s
    recipe on the clips of `data` (labels, if any, ignored) to reconstruct the tokens a mask hides. The
    encoder alone is registered as `model_name` with alias `alias`; `model.init_from` starts a
    fine-tune from it.
    """

    mask_ratio: float = Field(
        0.9, gt=0.0, lt=1.0, description="Fraction of each clip's tokens hidden (VideoMAE: 0.9 to 0.95)."
    )
    masking: Masking = Field(
        "tube",
        description="tube: the same positions hidden in every frame (VideoMAE; X-ViT and TimeSformer "
        "take only these); random: tokens hidden anywhere (the joint space-time ViT).",
    )
    decoder_depth: int = Field(4, ge=1, description="Transformer blocks of the decoder.")
    decoder_width: int = Field(384, ge=2, description="Token width of the decoder (VideoMAE: 384 for B/16).")
    decoder_heads: int = Field(6, ge=1, description="Attention heads of the decoder's blocks.")
    norm_pix_loss: bool = Field(
        True, description="Reconstruct each patch's pixels normalised per channel (VideoMAE's default)."
    )
    image_every: int = Field(
        0,
        ge=0,
        description="Log an image of a clip's frames (original, masked, reconstructed) every this many "
        "steps (0: at the last step only).",
    )
    model_name: str = Field("vidtx-encoder", description="MLflow registered model of the pretrained encoder.")
    alias: str = Field("pretrained", description="Alias the newest registered encoder gets.")

    @model_validator(mode="after")
    def _decoder_heads_divide_its_width(self) -> PretrainConfig:
        if self.decoder_width % self.decoder_heads or self.decoder_width % 2:
            raise ValueError(
                f"decoder_width {self.decoder_width} must be even and divisible by decoder_heads "
                f"{self.decoder_heads}"
            )
        return self
