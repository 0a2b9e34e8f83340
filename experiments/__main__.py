"""``python -m experiments NAME [--profile quick|paper] [-j JOBS] [--root runs] [--out reports]``."""

import sys

from experiments.runner import main

if __name__ == "__main__":
    sys.exit(main())
