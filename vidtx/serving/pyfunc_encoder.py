"""The file MLflow runs to build a registered pretrained encoder when it loads it (MLflow's "models
from code"), as `pyfunc_model.py` does for the classifier."""

from mlflow.models import set_model

from vidtx.serving.encoder import VideoEncoder

set_model(VideoEncoder())
