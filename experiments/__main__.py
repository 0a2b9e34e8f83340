"""``python -m experiments NAME [--profile quick|paper] [-j JOBS] [--root runs] [--out reports]
[--seeds N|auto [--seeds-cap N] [--seeds-rounds N,N,...]]
[hydra/launcher=joblib|submitit_local|submitit_slurm|ray] [hydra.launcher.KEY=VALUE ...]``."""

import sys

from experiments.runner import main

if __name__ == "__main__":
    sys.exit(main())
