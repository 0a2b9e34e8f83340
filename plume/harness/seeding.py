"""One ``seed`` per job, split into independent streams (DESIGN.md "Seeds").

Streams are spawned in a fixed order, so adding a stream at the end never changes the others.
"""

from __future__ import annotations

import numpy as np

STREAMS = ("torch", "env", "sampler", "eval")


def spawn_streams(seed: int) -> dict[str, np.random.SeedSequence]:
    """Independent SeedSequences for each consumer of randomness in a job."""
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return dict(zip(STREAMS, children))


def torch_seed(stream: np.random.SeedSequence) -> int:
    """A 63-bit integer seed for torch from a SeedSequence."""
    return int(stream.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
