"""The file MLflow runs to build the registered model when it loads it (MLflow's "models from code"):
no pickled object, just the class; `VideoClassifier.load_context` then reads the artifacts."""

from mlflow.models import set_model

from vidtx.serving.classifier import VideoClassifier

set_model(VideoClassifier())
