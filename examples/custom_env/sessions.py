"""link_share's runtime slice (``deployable.SPEC.deploy``): the session a deployed sender runs
and the recorder that says what it would have measured in the simulator.

It builds on ``plume.deploy.sessions`` (the checks of measurements and constants), so only the
deploy layer imports it, through the spec's lazy loader; the env itself never does.

``decide({"delivered_mbit", "sent_mbit", "lost_mbit"} | None)`` -> the next send rate, Mbit/s
(``None``: the first decision of a link).
"""
import numpy as np

from plume.deploy.sessions import constant_array, number
from plume.envs.registry import Deployment

MEASUREMENTS = ("delivered_mbit", "sent_mbit", "lost_mbit")
"""The measurement fields, in the observation's order (delivered, rate, lost)."""


class LinkShareSession:
    """One sender. Its observation is its three measurements of the last step, as the env's
    is (so there is no builder to share: the numbers are copied, float32 like the env's)."""

    def __init__(self, constants: dict) -> None:
        self.rates = constant_array(constants, "rates_mbps", 1)
        self.obs = np.zeros((1, len(MEASUREMENTS)), np.float32)

    def reset(self) -> None:
        """A new link: the env's first observation (nothing measured yet)."""
        self.obs[:] = 0.0

    def observe(self, measurement: dict | None) -> np.ndarray:
        if measurement is None:
            self.reset()
            return self.obs
        # every field is checked before the observation changes: a bad one leaves it as it was
        values = [number(measurement, key, low=0.0) for key in MEASUREMENTS]
        self.obs[0] = values
        return self.obs

    def action(self, a) -> float:
        return float(self.rates[int(a)])


class LinkShareRecorder:
    """What the sender reports after each step of the simulator: the step's observation row,
    which is exactly its three measurements."""

    def __init__(self, env, traces, contract: dict) -> None:
        self.rates = contract["constants"]["rates_mbps"]

    def start(self, i: int) -> tuple[dict, None]:
        return {}, None

    def after(self, i: int, step: dict, action) -> tuple[float, dict]:
        row = (float(x) for x in step["observation"][i])
        return float(self.rates[int(action)]), dict(zip(MEASUREMENTS, row))


SLICES = {None: Deployment(LinkShareSession, LinkShareRecorder)}
"""link_share has no variants: one runtime slice."""
