"""MLflow: the training run's lifecycle, model logging, the registry and its aliases."""
