"""The training runtime: the loop, its schedule, the monitor, the evaluator, the sampler session
and what builds them from a checked job."""
