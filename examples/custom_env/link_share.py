"""A user's own env: pick a send rate on a trace-driven link; pay twice for what overflows."""
import numpy as np
from gymnasium import spaces

from plume.envs import Anchors, EnvSpec, Metric, Score, TraceVecEnv
from plume.traces import TraceSet

RATES = np.array([1.0, 2.0, 4.0, 8.0])  # Mbit/s


class LinkShareEnv(TraceVecEnv):
    def __init__(self, traces, n_envs, sampler=None, *, mode="train", seed=None, params=None):
        self._setup(traces, n_envs, sampler, mode)
        self._set_spaces(spaces.Box(0.0, 8.0, (3,), np.float32), spaces.Discrete(len(RATES)))
        self._obs = np.zeros((self.num_envs, 3), np.float32)
        self._rewbuf = np.zeros((self.num_envs, traces.lengths.max()))  # what samplers score
        self._seed(seed)

    def step(self, actions):
        rate = RATES[self._check_step(actions, len(RATES), "rate")]
        bandwidth = self.trace_set.bandwidth[self._trace, self._eplen]
        delivered, lost = np.minimum(rate, bandwidth), np.maximum(rate - bandwidth, 0.0)
        self._obs[:] = np.stack([delivered, rate, lost], axis=1)
        self._rewbuf[np.arange(self.num_envs), self._eplen] = reward = delivered - 2.0 * lost
        self._eplen += 1
        done, infos = self._eplen >= self.trace_set.lengths[self._trace], {}
        if done.any():
            self._finish(done, infos)  # reports the episodes, updates the sampler, autoresets
        return self._obs.copy(), reward, done, np.zeros_like(done), infos

    def _observation(self):
        return self._obs

    def _episode_fields(self, mask):
        ret = np.where(mask, self._rewbuf.sum(axis=1), 0.0)  # the base adds length and trace
        return {"return": ret, "return_transformed": ret}

    def _restart(self, ids):
        self._trace[ids], _ = self._draw(ids, np.ones(len(self.trace_set), int), True)
        self._eplen[ids], self._rewbuf[ids], self._obs[ids] = 0, 0.0, 0.0


def load(dataset, split, n=300, steps=60):  # 20 % bursty links (1 or 8 Mbit/s), 80 % steady
    rng = np.random.default_rng({"train": 0, "test": 1}[split])
    bursty = rng.random((n, 1)) < 0.2
    bandwidth = np.where(bursty, rng.choice([1.0, 8.0], (n, steps)), rng.uniform(3, 8, (n, 1)))
    return TraceSet(name=f"{dataset}/{split}", labels=np.where(bursty[:, 0], "bursty", "steady"),
                    series={"bandwidth": bandwidth})


SPEC = EnvSpec(
    name="link_share", description="a send rate on a trace-driven link", make=LinkShareEnv,
    datasets={"links": "steady and bursty links"}, load_builtin=load,
    episode_fields=(Metric("return", "Mbit", True, "delivered - 2 x overflow"),
                    Metric("return_transformed", "Mbit", True, "the same"),
                    Metric("length", "steps", True, "steps played")),
    score=Score("mbit_per_step", "Mbit/step", "return per step",
                lambda ep: np.asarray(ep["return"]) / np.asarray(ep["length"])),
    anchors=lambda params: Anchors(floor=0.0, ceiling=8.0, description="0 to 8 Mbit/s"))
