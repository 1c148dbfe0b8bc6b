"""`vidtx convert`: a VideoMAE checkpoint as people download it, written as a vidtx `.pt`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from vidtx import storage
from vidtx.models import save_checkpoint
from vidtx.models.videomae_checkpoints import PRESET, read_videomae


def convert_checkpoint(source: str, target: Path) -> str:
    """Write `source` (a Hugging Face folder or file, an official `.pth`; a file may be in a bucket)
    as a vidtx `.pt` at `target`: its encoder, and a pretraining's decoder with it. What was found,
    what was written and the settings that train from it, as lines."""
    with storage.local_copy(source) as local:
        found = dataclasses.replace(read_videomae(local), source=source)
    save_checkpoint(found.encoder(), target, decoder=found.weights.decoder)
    settings = f"--set model.name={PRESET}"
    if options := found.model_options():
        settings += f" --set 'model.options={json.dumps(options)}'"
    kept = "its encoder and decoder" if found.weights.decoder else "the model"
    lines = [
        f"found {found.summary()}",
        f"wrote {target}: {kept}",
        f"fine-tune: {settings} --set model.init_from={target}",
    ]
    if found.weights.decoder:
        lines.append(
            f"continue its pretraining: vidtx pretrain CONFIG {settings} --set model.init_from={target}"
        )
    return "\n".join(lines)
