"""The pretraining harness behind `atlas train`."""

from atlas_experiments.train.config import TrainConfig, TrainConfigError

__all__ = ["TrainConfig", "TrainConfigError"]
