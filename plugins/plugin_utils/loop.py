"""The per-host remediation loop: vendor fixes first, then the agents, every attempt undone
when it fails. The public entry of the engine; its parts live in ``_run/``:

1. ``_run.setup.build``: the run context (content, profile, scope, waivers, skill, memory,
   health baseline, the host session's services) and a fresh run state;
2. the baseline scan (``_run.verifier``), or an interrupted start's (``_run.resume``);
   every rule that fails is a work item; ``error``/``unknown``/``notchecked`` are reported,
   never worked on (DESIGN decision 3);
3. ``_run.vendor.VendorPhase``: per rule, waiver and access checks, what memory knows, then
   the content's own fix in batches under checkpoints, one health check and one oscap call
   per batch; what does not pass is rolled back and its restore verified;
4. a rescan picks up rules that became applicable and works them;
5. ``agent_loop.WorkerPhase``: what is left goes to the Architect, Worker and Reflector;
6. ``_run.deferred.DeferredPhase``: reboot-marked fixes, with ``allow_reboot``;
7. the final scan, regressions, ``_run.report``: the host report and run_end.
"""

from __future__ import annotations

from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.engine import RemediationLoop
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.options import LoopOptions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.vendor import Applied, task_names

__all__ = ["Applied", "LoopOptions", "RemediationLoop", "task_names"]
