"""The `switchyard` command line, a client of the portal's REST API (docs/cli.md).

A package of its own: installing it installs PyYAML and nothing of the portal (no Django).
"""

from switchyard_cli.cli import main

__all__ = ["main"]
