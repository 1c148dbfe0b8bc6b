"""The model zoo: X-ViT and its baselines behind one registry.

```python
from vidtx.models import create_model
model = create_model("xvit_tiny", num_classes=10)   # clips (B, C, T, H, W) -> logits (B, 10)
```
"""

from vidtx.models.flops import FlopCount, count_flops
from vidtx.models.mixing import space_time_mix
from vidtx.models.presets import (
    PRESETS,
    create_model,
    list_models,
    load_checkpoint,
    model_info,
    model_options,
)
from vidtx.models.spacetime import JointSpaceTime, TimeSformer
from vidtx.models.video import VideoTransformer
from vidtx.models.vit import VisionTransformer, ViTEncoder, no_weight_init
from vidtx.models.vivit import ViViTFactorisedEncoder
from vidtx.models.weights import LoadReport, load_image_vit, read_state_dict, save_checkpoint
from vidtx.models.xvit import XViT

__all__ = [
    "PRESETS",
    "FlopCount",
    "JointSpaceTime",
    "LoadReport",
    "TimeSformer",
    "ViTEncoder",
    "ViViTFactorisedEncoder",
    "VideoTransformer",
    "VisionTransformer",
    "XViT",
    "count_flops",
    "create_model",
    "list_models",
    "load_checkpoint",
    "load_image_vit",
    "model_info",
    "model_options",
    "no_weight_init",
    "read_state_dict",
    "save_checkpoint",
    "space_time_mix",
]
