"""The stage layer: what the CLI and the Prefect flows run after training.

`trained_model` turns what names a trained model (a training run, a Ray/DeepSpeed checkpoint, a vidtx
`.pt` file, a `models:/` URI) into weights; `evaluate` and `register` are the evaluation and registry
stages that log into the training run's MLflow run.
"""
