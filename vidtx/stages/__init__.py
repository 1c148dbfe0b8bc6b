"""The pipeline's steps, one module each, each a plain function from its config section to its result;
the `vidtx` CLI and the Prefect flows (`flows/`) call the same ones:

- `shard.shard_dataset(shard, synth) -> ShardOutcome`: videos into WebDataset shards and manifests;
- `train.train(config) -> TrainResult`: Ray Train + DeepSpeed, one MLflow run;
- `evaluate.evaluate_trained(config, trained) -> EvalResult`: multi-view evaluation, logged;
- `register.register_trained(config, trained, result) -> ModelVersionInfo`: the MLflow registry;
- `predict.predict_videos(classifier, version, videos) -> PredictionSummary`: a registered model on
  videos, in process or on Ray Data;
- `sweep.run_sweep(config) -> SweepResult`: Ray Tune over the training stage.

`trained_model` says which checkpoint or registered model a later stage uses; `scoring` and
`ray_scoring` are the predict stage's two ways of scoring, `sweep_trial` and `sweep_result` the sweep's
trials and outcome.
"""
