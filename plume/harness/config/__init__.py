"""The configuration: where the configs live, the typed job config and its checks (``schema``),
and the preflight that reads every input before anything is written."""
