"""The registered pretrained encoder as MLflow runs it: encoded videos in, one embedding per video out.

A pretraining (`vidtx pretrain`) registers its encoder, decoder dropped, as this pyfunc model: what a
fine-tune's `model.init_from` names (`models:/vidtx-encoder@pretrained`), and a feature extractor in
its own right. Input and views as every served model takes them (`vidtx.serving.video_model`).
Output, one row per input row: `embedding`, the encoder's final features averaged over the video's
test views (a list of `embed_dim` floats, ready for a vector index), and `error` as the classifier's.
"""

from __future__ import annotations

from typing import ClassVar

from vidtx.clips.views import view_embeddings
from vidtx.results import Embedding
from vidtx.serving.video_model import VIDEO_ERRORS, ServedVideoModel, error_text

OUTPUT_COLUMNS = ("embedding", "error")


class VideoEncoder(ServedVideoModel):
    """The encoder's network and the config it was pretrained with; loaded from the model's artifacts."""

    OUTPUT_COLUMNS: ClassVar[tuple[str, ...]] = OUTPUT_COLUMNS

    def answer(self, video: bytes | str, **settings: int) -> Embedding:
        return self.embed(video, **settings)

    def embed(self, video: bytes | str, *, num_clips: int, num_crops: int) -> Embedding:
        try:
            views = self.views(video, num_clips, num_crops)
        except VIDEO_ERRORS as err:
            return Embedding(error=error_text(err))
        features = view_embeddings(self.module, self.config.data, views)  # (views, D)
        return Embedding(features.mean(dim=0).tolist())
