"""A masked autoencoder over a video model of the zoo (VideoMAE, Tong et al., NeurIPS 2022).

Most of a clip's tokens are hidden (`vidtx.models.masking`: 90% by default, tubes). The encoder, the
zoo's video model, runs on the visible tokens only (`encode_visible`: hidden ones are never
embedded into its sequence, so a step costs about the visible fraction of a supervised one). A small
decoder gets the visible tokens' features projected to its width, a learned mask token in every
hidden place, and fixed sinusoidal positions over all T'·N tokens; it predicts each token's pixels
(tubelet x patch x patch x 3). The loss is the mean squared error over the hidden tokens only, against
each patch's pixels in [0, 1] (the clips un-normalised with the data's `pixel_mean` / `pixel_std`),
normalised per patch and channel (`norm_pix_loss`, VideoMAE's default) or not: VideoMAE's own targets,
so that its released pretraining checkpoints continue here with the loss they were trained on. The
encoder alone is what a fine-tune starts from (`ENCODER_PREFIX` in the state dict); a continued
pretraining takes the decoder too (`decoder_state`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vidtx.models.masking import Masking, sample_mask, visible_count, visible_indices
from vidtx.models.video import VideoTransformer
from vidtx.nn import TransformerBlock, run_blocks, sinusoidal_table

ENCODER_PREFIX = "encoder."  # the encoder's parameters in a pretrained model's state dict
NORMALISATION = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)  # vidtx's default data.mean, data.std


@dataclass
class Reconstruction:
    """What one forward pass gives: the loss, each token's predicted pixels and the mask."""

    loss: Tensor  # scalar: MSE over the hidden tokens
    pixels: Tensor  # (B, T'·N, P) predicted pixels of every token, P = tubelet·patch²·3
    mask: Tensor  # (B, T'·N) bool, True where hidden


class MaskedAutoencoder(nn.Module):
    """`encoder` (a zoo video model with `MASKINGS`) and a decoder: clips (B, C, T, H, W) ->
    `Reconstruction`.

    Args:
        encoder: The video model whose features are learned; its head is not used.
        mask_ratio: Fraction of the tokens hidden, in (0, 1).
        masking: "tube" (the same positions at every step) or "random"; one of `encoder.MASKINGS`.
        decoder_depth: Transformer blocks of the decoder.
        decoder_dim: Token width of the decoder; a multiple of 2 (sinusoidal positions) and of
            `decoder_heads`.
        decoder_heads: Attention heads of the decoder's blocks.
        norm_pix_loss: Targets are each patch's pixels normalised per channel (mean 0, std 1).
        pixel_mean, pixel_std: The per-channel normalisation the clips come with (`data.mean`,
            `data.std`), undone for the targets.
    """

    def __init__(
        self,
        encoder: VideoTransformer,
        *,
        mask_ratio: float = 0.9,
        masking: Masking = "tube",
        decoder_depth: int = 4,
        decoder_dim: int = 384,
        decoder_heads: int = 6,
        norm_pix_loss: bool = True,
        pixel_mean: Sequence[float] = NORMALISATION[0],
        pixel_std: Sequence[float] = NORMALISATION[1],
    ) -> None:
        super().__init__()
        if not encoder.MASKINGS:
            raise ValueError(
                f"{type(encoder).__name__} cannot encode visible tokens only: it does not pretrain"
            )
        if masking not in encoder.MASKINGS:
            raise ValueError(
                f"{type(encoder).__name__} takes {' or '.join(encoder.MASKINGS)} masking, not {masking}"
            )
        if decoder_dim % decoder_heads or decoder_dim % 2:
            raise ValueError(
                f"decoder width {decoder_dim} must be even and divisible by its {decoder_heads} heads"
            )
        self.encoder = encoder
        encoder.head.requires_grad_(False)  # the classifier takes no part in the reconstruction
        self.mask_ratio, self.masking, self.norm_pix_loss = mask_ratio, masking, norm_pix_loss
        self.steps, self.patches = encoder.token_frames, encoder.patch_embed.num_patches
        visible_count(masking, self.steps, self.patches, mask_ratio)  # refuses a mask that hides all
        self.tubelet, self.patch_size = encoder.tubelet_size, encoder.patch_size
        pixels = self.tubelet * self.patch_size**2 * 3
        for name, values in (("pixel_mean", pixel_mean), ("pixel_std", pixel_std)):
            self.register_buffer(name, torch.tensor(values).view(1, -1, 1, 1, 1), persistent=False)
        self.decoder_embed = nn.Linear(encoder.embed_dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        self.register_buffer(
            "decoder_pos", sinusoidal_table(self.steps * self.patches, decoder_dim)[None], persistent=False
        )  # (1, T'·N, Dd): fixed, so not in the state dict
        self.decoder_blocks = nn.Sequential(
            *(
                TransformerBlock(decoder_dim, decoder_heads, norm_eps=encoder.norm_eps)
                for _ in range(decoder_depth)
            )
        )
        self.decoder_norm = nn.LayerNorm(decoder_dim, eps=encoder.norm_eps)
        self.decoder_pred = nn.Linear(decoder_dim, pixels)
        for module in [self.decoder_embed, *self.decoder_blocks.modules(), self.decoder_pred]:
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        self.checkpoint_every = 0

    def set_activation_checkpointing(self, every: int) -> None:
        """The encoder's and the decoder's blocks (see `ViTEncoder.set_activation_checkpointing`)."""
        self.encoder.set_activation_checkpointing(every)
        self.checkpoint_every = every

    def no_weight_decay(self) -> set[str]:
        return {f"{ENCODER_PREFIX}{name}" for name in self.encoder.no_weight_decay()} | {"mask_token"}

    def patchify(self, clips: Tensor) -> Tensor:
        """Clips (B, C, T, H, W) -> each token's pixels (B, T'·N, P), in the order the encoder numbers
        them (step-major; within a token: frame, row, column, channel)."""
        batch, channels, frames, height, width = clips.shape
        t, p = self.tubelet, self.patch_size
        x = clips.reshape(batch, channels, frames // t, t, height // p, p, width // p, p)
        x = x.permute(0, 2, 4, 6, 3, 5, 7, 1)  # (B, T', h, w, t, p, p, C)
        return x.reshape(batch, (frames // t) * (height // p) * (width // p), t * p * p * channels)

    def unpatchify(self, pixels: Tensor, channels: int = 3) -> Tensor:
        """Each token's pixels (B, T'·N, P) -> clips (B, C, T, H, W): `patchify` undone."""
        batch, t, p = pixels.shape[0], self.tubelet, self.patch_size
        side = self.encoder.img_size // p
        x = pixels.reshape(batch, self.steps, side, side, t, p, p, channels)
        x = x.permute(0, 7, 1, 4, 2, 5, 3, 6)  # (B, C, T', t, h, p, w, p)
        return x.reshape(batch, channels, self.steps * t, side * p, side * p)

    def pixels(self, clips: Tensor) -> Tensor:
        """Each token's pixels in [0, 1], the clips (B, C, T, H, W) un-normalised: (B, T'·N, P), float32."""
        return self.patchify(clips.float() * self.pixel_std + self.pixel_mean)

    def _patch_statistics(self, pixels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Each token's pixels (B, T'·N, P) per channel (B, T'·N, t·p·p, C), their mean and spread
        (unbiased) + 1e-6: what `norm_pix_loss` normalises by."""
        per_channel = pixels.unflatten(-1, (-1, self.pixel_mean.shape[1]))
        spread = per_channel.var(dim=-2, unbiased=True, keepdim=True).sqrt() + 1e-6
        return per_channel, per_channel.mean(dim=-2, keepdim=True), spread

    def targets(self, clips: Tensor) -> Tensor:
        """What each token's pixels are compared to: (B, T'·N, P), in float32."""
        pixels = self.pixels(clips)
        if not self.norm_pix_loss:
            return pixels
        per_channel, mean, spread = self._patch_statistics(pixels)
        return ((per_channel - mean) / spread).flatten(-2)

    def predicted_pixels(self, predicted: Tensor, clips: Tensor) -> Tensor:
        """Predictions (B, T'·N, P) as pixels in [0, 1]: per-patch normalised ones put back at the
        mean and spread of the clips' own patches."""
        if not self.norm_pix_loss:
            return predicted
        _, mean, spread = self._patch_statistics(self.pixels(clips))
        return (predicted.unflatten(-1, (-1, mean.shape[-1])) * spread + mean).flatten(-2)

    def forward(self, clips: Tensor, mask: Tensor | None = None) -> Reconstruction:
        """Reconstruct clips (B, C, T, H, W) from their visible tokens; `mask` (B, T'·N) bool, True
        where hidden (default: a new one from `mask_ratio` and `masking`)."""
        batch = clips.shape[0]
        if mask is None:
            mask = sample_mask(
                batch, self.steps, self.patches, self.mask_ratio, self.masking, device=clips.device
            )
        visible = visible_indices(mask)  # (B, K)
        latent = self.decoder_embed(self.encoder.encode_visible(clips, visible))  # (B, K, Dd)
        tokens = self.mask_token.to(latent.dtype).expand(batch, mask.shape[1], -1)  # (B, T'·N, Dd)
        tokens = tokens.scatter(1, visible[..., None].expand(-1, -1, latent.shape[-1]), latent)
        positioned = tokens + self.decoder_pos.to(tokens.dtype)
        decoded = self.decoder_norm(run_blocks(self.decoder_blocks, positioned, self.checkpoint_every))
        pixels = self.decoder_pred(decoded).float()  # (B, T'·N, P)
        per_token = (pixels - self.targets(clips)).pow(2).mean(dim=-1)  # (B, T'·N)
        loss = (per_token * mask).sum() / mask.sum()
        return Reconstruction(loss, pixels, mask)


def decoder_state(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """The decoder's tensors of a masked autoencoder's state dict (all but the encoder's)."""
    return {name: value for name, value in state_dict.items() if not name.startswith(ENCODER_PREFIX)}


def encoder_state(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """The encoder's tensors of a masked autoencoder's state dict, named as in the encoder alone."""
    return {
        name[len(ENCODER_PREFIX) :]: value
        for name, value in state_dict.items()
        if name.startswith(ENCODER_PREFIX)
    }
