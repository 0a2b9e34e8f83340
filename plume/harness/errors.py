"""The harness's one error type for a user's mistake (config value, trace file, dataset)."""


class ConfigError(ValueError):
    """A job's configuration or data is invalid; the message names the key, file, line or
    trace and what was expected, in one line (printed without a traceback)."""
