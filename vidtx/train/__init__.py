"""Distributed training: Ray Train launches workers, each runs a DeepSpeed engine.

Entry point: `vidtx.train.launcher.train(config) -> TrainResult`.
"""
