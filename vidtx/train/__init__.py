"""The distributed training machinery that the training and sweep stages share (`vidtx.stages.train`,
`vidtx.stages.sweep`): Ray Train launches the workers (or a Ray Job runs them), each runs a DeepSpeed
engine over the loop, checkpoints and metrics go to storage and MLflow.
"""
