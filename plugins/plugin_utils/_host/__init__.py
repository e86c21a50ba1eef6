"""The host a run works on, as the engine sees it: one session over the action plugin."""
