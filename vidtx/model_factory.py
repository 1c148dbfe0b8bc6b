"""The model a pipeline config asks for, the check that a config can build one, and the zoo's table.

The config schema and the model zoo know nothing of each other; this module joins them. The number
of classes comes from the training split's manifest, frames and crop size from `config.data`, the rest
from `config.model`.
"""

from __future__ import annotations

import torch

from vidtx.config import ConfigError, ModelConfig, PipelineConfig
from vidtx.manifest import load_manifest, merged_class_names
from vidtx.markdown import markdown_table
from vidtx.models import (
    PRESETS,
    VideoTransformer,
    create_model,
    list_models,
    load_image_vit,
    model_info,
    no_weight_init,
)
from vidtx.models.mae import MaskedAutoencoder
from vidtx.models.weights import load_official_checkpoint, official_num_classes, read_official_checkpoint


def build_model(cfg: ModelConfig, *, num_classes: int, num_frames: int, img_size: int) -> VideoTransformer:
    """The network of `cfg`; loads `cfg.pretrained` (image ViT, timm names) when set."""
    model = create_model(
        cfg.name,
        num_classes=num_classes,
        num_frames=num_frames,
        img_size=img_size,
        attention_impl=cfg.attention_impl,
        drop_path_rate=cfg.drop_path_rate,
        head_dropout=cfg.head_dropout,
        **cfg.options,
    )
    if cfg.pretrained:
        load_image_vit(model, cfg.pretrained)
    if cfg.checkpoint:
        state = read_official_checkpoint(cfg.checkpoint)
        load_official_checkpoint(model, state, classifier=official_num_classes(state) == num_classes)
    return model


def model_for(config: PipelineConfig, num_classes: int | None = None) -> VideoTransformer:
    """The model `config` trains, with `num_classes` classes (default: as many as its training data's
    sources name together)."""
    data = config.data
    splits = (load_manifest(source.shards, data.train_split) for source in data.training_sources())
    num_classes = num_classes or len(merged_class_names(splits))
    return build_model(
        config.model, num_classes=num_classes, num_frames=data.num_frames, img_size=data.crop_size
    )


def masked_autoencoder(config: PipelineConfig) -> MaskedAutoencoder:
    """The masked autoencoder that `config.pretrain` describes, around `config.model`'s network built
    as its preset pretrains (`PRETRAINING_OPTIONS`: VideoMAE's ViT ends in a norm), under the options
    `config.model` sets itself."""
    pretrain, model = config.pretrain, config.model
    options = PRESETS[model.name].model_cls.PRETRAINING_OPTIONS | model.options
    encoder = model_for(config.model_copy(update={"model": model.model_copy(update={"options": options})}), 1)
    return MaskedAutoencoder(
        encoder,
        mask_ratio=pretrain.mask_ratio,
        masking=pretrain.masking,
        decoder_depth=pretrain.decoder_depth,
        decoder_dim=pretrain.decoder_width,
        decoder_heads=pretrain.decoder_heads,
        norm_pix_loss=pretrain.norm_pix_loss,
        pixel_mean=config.data.mean,
        pixel_std=config.data.std,
    )


def check_pretrain_config(config: PipelineConfig) -> MaskedAutoencoder:
    """`check_model_config`, then ConfigError naming the fields when `config.pretrain` cannot wrap the
    network (a masking it does not take, a mask that leaves no token visible). On the meta device."""
    check_model_config(config)
    unloaded = config.model.model_copy(update={"pretrained": None, "checkpoint": None})  # no file read
    try:
        with torch.device("meta"), no_weight_init():
            return masked_autoencoder(config.model_copy(update={"model": unloaded}))
    except (ValueError, NotImplementedError) as err:
        pretrain = config.pretrain
        fields = [f"model.name={config.model.name}", f"pretrain.masking={pretrain.masking}"]
        fields += [f"pretrain.mask_ratio={pretrain.mask_ratio}", f"data.num_frames={config.data.num_frames}"]
        raise ConfigError(f"{', '.join(fields)}: {err}") from None


def check_model_config(config: PipelineConfig) -> VideoTransformer:
    """Raise ConfigError naming the fields when `config.model` names no preset, an option the preset
    does not take, or a network that cannot be built for `config.data` (a crop size that is not a
    multiple of the patch size, frames that do not split into the model's segments). Builds the model
    on the meta device (no memory, no weights read or initialised), so every entry point can afford
    it up front; returns that network (for checks of names and shapes)."""
    model, data = config.model, config.data
    if model.name not in (valid := list_models()):
        raise ConfigError(f"model.name: unknown model preset {model.name!r}; valid: {', '.join(valid)}")
    try:
        with torch.device("meta"), no_weight_init():
            network = build_model(
                model.model_copy(update={"pretrained": None, "checkpoint": None}),
                num_classes=2,
                num_frames=data.num_frames,
                img_size=data.crop_size,
            )
    except TypeError as err:
        raise ConfigError(f"model.options: {err}") from None
    except ValueError as err:  # the model's own checks, on sizes that come from these fields
        fields = [f"data.crop_size={data.crop_size}", f"data.num_frames={data.num_frames}"]
        fields += [f"model.name={model.name}"] + [f"model.options.{k}={v}" for k, v in model.options.items()]
        raise ConfigError(f"{', '.join(fields)}: {err}") from None
    return network


def zoo_table() -> str:
    """Every preset with its parameters and GFLOPs per view (multiply-adds), as a Markdown table."""
    header = ["preset", "model", "frames x size", "params (M)", "GFLOPs/view", "attn GFLOPs"]
    row = "{name}|{model}|{num_frames}x{img_size}|{mparams:.1f}|{gflops:.2f}|{attention_gflops:.2f}"
    infos = [model_info(name) for name in list_models()]
    return markdown_table(
        header, [row.format(**info, mparams=info["params"] / 1e6).split("|") for info in infos]
    )
