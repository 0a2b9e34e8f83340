"""The outside tools the harness speaks to: Weights & Biases (``tracking``) and Optuna (``tune``,
used by the ``plume_optuna`` sweeper)."""
