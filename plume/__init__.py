"""Plume: prioritized trace sampling for deep-RL network controllers (arXiv 2302.12403).

Layers, imports pointing down only (see docs/ARCHITECTURE.md):
``traces`` -> ``analysis`` -> ``sampling`` -> ``envs`` -> ``agents`` -> ``harness`` -> ``report``.
``traces``, ``analysis`` and ``sampling`` need neither Hydra nor W&B.
"""

__version__ = "0.1.0"
