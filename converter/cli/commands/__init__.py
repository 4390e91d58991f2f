"""CLI commands, one module each; every module exposes ``register(app)``.

Modules keep their top-level imports light: heavy libraries are imported inside the commands.
"""

COMMAND_MODULES = (
    "inspect",
    "normalize",
    "check",
    "plan",
    "report",
    "split",
    "verify",
    "port",
    "batch",
    "demo",
)
