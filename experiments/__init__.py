"""One command per paper simulation figure: ``python -m experiments NAME``.

``experiments.runner`` holds the job list of every figure (which ``plume-train`` jobs it needs
in each profile), finds the finished ones, submits the missing ones as one Hydra multirun
through the chosen launcher (``hydra/launcher=joblib|submitit_local|submitit_slurm|ray``) and
calls ``experiments.figures`` to draw the figures and the rliable report from the run
directories.
"""
