"""What model-written and vendor tasks may do, and what they do: the gate's policy parts.

``effects``: one table of what shell commands and Ansible modules read and write (the gate,
the checkpoint's path analysis and the probe allowlist read it); ``routing``: module names
resolved as Ansible resolves them; ``refusals``: the gate's machine-readable refusal codes.
"""
