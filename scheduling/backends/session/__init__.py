"""Live sandboxes' runtime (docs/sandboxes.md): the agent inside the sandbox (agent.py), the
portal's client for it (wire.py), and what the trusted side adds to a sandbox to make it a
session (box.py)."""
