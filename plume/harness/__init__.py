"""The harness: the command-line apps and what they stand on, by concern (``apps``,
``training``, ``integrations``, ``config``; each imports only those below it). With
``experiments`` and the sweepers, the only code that knows Hydra; the only code that knows W&B.
"""
