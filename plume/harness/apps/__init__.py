"""The command-line apps: each a Hydra entry point over ``conf/`` that checks its job, then hands
it to the run layer's job lifecycle (``plume.runs.lifecycle``)."""
