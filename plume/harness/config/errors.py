"""The harness's error types for a user's mistake (config value, trace file, dataset) and for
a job a sweep refuses: each one line, never a traceback. A write the system refuses is the run
layer's :class:`~plume.runs.errors.WriteFailed`."""


class ConfigError(ValueError):
    """A job's configuration or data is invalid; the message names the key, file, line or
    trace and what was expected, in one line (printed without a traceback)."""


class JobRefused(RuntimeError):
    """A job of a sweep refused with a one-line reason (a ConfigError, a diverged learner, a
    run directory in use): the sweeper prints it and the sweep goes on with the others."""
