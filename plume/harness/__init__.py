"""The harness: Hydra entry points, run directories, W&B, evaluation. Only this layer knows
Hydra and W&B."""
