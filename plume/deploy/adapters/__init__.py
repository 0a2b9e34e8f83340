"""Protocol adapters: a Plume export (``plume.deploy.runtime``) behind the interfaces real
players and senders already speak, so a trained controller is tested where it would run.

* :mod:`.pensieve`: Pensieve's dash.js decision server (HTTP POST per chunk, port 8333);
* :mod:`.puffer`: Puffer's ``python_ipc`` (a Unix socket, 2-byte big-endian length + JSON);
* :mod:`.pcc`: PCC-Uspace's Python rate-control helper (``init``, ``give_sample``,
  ``get_rate``, ``reset``).

``plume-serve`` (``plume.deploy.serve``) starts each one. Only the standard library, numpy and
``plume.deploy.runtime`` are imported: no torch where the adapters run.
"""
