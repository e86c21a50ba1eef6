"""Continuing an interrupted start of the same run id (issue 7, "Resume"): the outcomes it
finished and its baseline are kept; the attempts it left open are settled first, newest
first: restored from their checkpoint and verified, unless the dead-man switch already did
it or the checkpoint is gone."""

from __future__ import annotations

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import CheckpointError


def resume(ctx, state) -> dict:
    """Take over what the interrupted start left; returns its baseline scan."""
    left = ctx.resume
    for rule, data in left.outcomes.items():
        state.outcomes[rule] = outcomes.RuleOutcome(**data)
    for entry in reversed(left.open):
        state.interrupted.append(settle(ctx, entry))
    ctx.emit("resume", start=left.starts + 1, finished=len(state.outcomes), interrupted=state.interrupted,
             damaged=left.damaged)
    return dict(left.baseline, label="baseline")


def settle(ctx, entry: dict) -> dict:
    """Roll back one attempt a crash left open; returns what was found and done."""
    found = dict(rule=safety.short_rule_id(entry["rule"]), attempt=entry["attempt"], checkpoint=entry["checkpoint"])
    try:
        checkpoint = ctx.runner.checkpoints.attach(entry["checkpoint"])
        switch = checkpoint.deadman_status() if getattr(checkpoint, "supports_deadman", False) else None
        if switch is not None and switch.fired:  # the switch restored it while the controller was away
            found.update(rolled_back=bool(switch.result and switch.result.verified), by="dead-man switch",
                         detail=switch.detail)
        else:
            result = checkpoint.restore()
            nothing = result.missing
            found.update(rolled_back=None if nothing else bool(result.verified), by=None if nothing else "resume",
                         detail=result.detail)
    except (CheckpointError, AnsibleError) as exc:
        found.update(rolled_back=False, by=None, detail="could not restore: %s" % str(exc)[:300])
    if found["rolled_back"] is not False:
        ctx.progress.append("close", rule=entry["rule"], attempt=entry["attempt"])
    return found
