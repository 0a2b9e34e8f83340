"""One command per paper simulation figure: ``python -m experiments NAME``.

``experiments.runner`` holds the job list of every figure (which ``plume-train`` jobs it needs
in each profile), finds the finished ones, trains the missing ones in a pool of subprocesses and
calls ``experiments.figures`` to draw the figures and the rliable report from the run
directories.
"""
