"""A sampler of your own: prefer traces with a low mean throughput (softmax over z-scores).

plume-train sampler.package=examples/my_sampler.py sampler.name=low_throughput
"""

from dataclasses import dataclass

import numpy as np

from plume.sampling import SamplerNeeds, register_sampler
from plume.sampling.checks import fraction, positive
from plume.sampling.mixture import EpsilonMixtureSampler


@dataclass
class LowThroughputConfig:
    temperature: float = 1.0  # softmax temperature over -z(mean throughput); smaller: greedier
    epsilon: float = 0.1  # share of uniform draws

    def __post_init__(self):  # errors name the key: sampler.temperature, sampler.epsilon
        self.temperature = positive("temperature", self.temperature)
        self.epsilon = fraction("epsilon", self.epsilon)


@register_sampler
class LowThroughputSampler(EpsilonMixtureSampler):
    name = "low_throughput"
    CONFIG = LowThroughputConfig
    NEEDS = SamplerNeeds(inputs=("mean_throughput",))  # the harness passes each trace's mean

    def __init__(self, n_traces, rng, mean_throughput, config=None, **options):
        super().__init__(n_traces, rng, config, **options)  # draws: (1 - eps) p + eps uniform
        tput = np.asarray(mean_throughput, dtype=np.float64)
        z = (tput - tput.mean()) / (tput.std() or 1.0)
        self.set_prioritised(np.exp((z.min() - z) / self.config.temperature))
