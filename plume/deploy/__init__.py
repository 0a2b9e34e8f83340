"""Deployment: a trained controller outside the simulator.

- ``plume-export <run dir>`` (``plume.harness.apps.export``) writes the greedy actor as TorchScript
  and ONNX with ``contract.json`` (:mod:`plume.deploy.contract`), checked for parity on the
  run's own test observations (:mod:`plume.deploy.export`).
- :func:`load_controller` (:mod:`plume.deploy.runtime`) answers raw measurements without torch,
  building observations with the simulator's own code (:mod:`plume.deploy.sessions`).
- ``plume-serve`` (:mod:`plume.deploy.serve`) speaks Pensieve's, Puffer's and PCC's protocols.

This package imports no torch: the export module imports it where it is used.
"""

from plume.deploy.runtime import DeployedController, load_controller

__all__ = ["DeployedController", "load_controller"]
