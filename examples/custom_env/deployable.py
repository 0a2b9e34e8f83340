"""The link_share env (``link_share.py``, unchanged), deployable: its SPEC plus what an export's
``contract.json`` says of it (:func:`describe`) and where its runtime slice lives
(``sessions.py``). ``conf/env/link_share.yaml`` names this module, so ``plume-train
env=link_share`` trains it, ``plume-export`` exports it and
``plume.deploy.load_controller(export, spec=SPEC)`` serves it: nothing outside this folder.

Only numpy and the env registry are imported here: the session builds on ``plume.deploy``, so
it stays in ``sessions.py``, which only the deploy layer loads (through ``SPEC.deploy``).
"""
import dataclasses
from pathlib import Path

from plume.envs.registry import lazy
from plume.user_modules import import_user_module

HERE = Path(__file__).parent
# link_share.py loaded as plume-train loads an env.package (one module for both names)
link_share = import_user_module(str(HERE / "link_share.py"), "env.package", "plume_user_env")
MEASURED = (("delivered", "what arrived in the last step"), ("rate", "what was sent"),
            ("lost", "what overflowed the link"))


def describe(params) -> dict:
    """The observation (the sender's three measurements of its last step, Mbit), the action
    (an index into the send rates) and the constants the session needs."""
    rates = link_share.RATES.tolist()
    fields = [{"name": name, "unit": "Mbit", "position": [i, i + 1], "history": None,
               "normalisation": None, "meaning": meaning}
              for i, (name, meaning) in enumerate(MEASURED)]
    return {"observation": {"layout": [len(fields)], "order": "flat", "dtype": "float32",
                            "fields": fields},
            "action": {"kind": "discrete", "n": len(rates), "start": 0,
                       "meaning": "the send rate of the next step, Mbit/s", "rates_mbps": rates},
            "constants": {"rates_mbps": rates}}


SPEC = dataclasses.replace(
    link_share.SPEC, deployment=describe,
    deploy=lazy(HERE / "sessions.py", "SLICES"))  # builds on plume.deploy: loaded by it alone
