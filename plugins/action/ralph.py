# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for scapforge.remediation.ralph: the per-host remediation loop.

The work happens in plugin_utils.loop on the controller; this plugin validates the task
arguments, builds the loop's options and turns its report into a compact task result.
"""

from __future__ import annotations

import json
import os
import uuid

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.scapforge.remediation.plugins.module_utils.ralph_options import ARGUMENT_SPEC
from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempts import Budget
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import utc_now
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import ControllerGone, LoopError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import LLMConfig
from ansible_collections.scapforge.remediation.plugins.plugin_utils.loop import LoopOptions, RemediationLoop
from ansible_collections.scapforge.remediation.plugins.plugin_utils.prompts import PromptError, PromptSet
from ansible_collections.scapforge.remediation.plugins.plugin_utils.skills import SkillError, load_skill
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import error_report, write_host_report

#: module options that are LoopOptions fields of the same name and value.
_PASSED_AS_IS = (
    "datastream", "profile", "datastream_src", "tailoring_src", "trusted_sha256", "rules", "skip_rules", "waivers",
    "allow_access_impacting", "health_check", "rescan", "time_budget", "verify_batch", "scan_timeout", "skill",
    "skill_description", "memory_path", "memory_retry", "allow_controller", "health_commands",
    "deadman_seconds", "allow_reboot", "checkpoint_provider", "checkpoint_options",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        deps.require("filelock", "jsonschema", "lxml", "openai", "tinydb", error=AnsibleActionFail)
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)

        # Without the role's run id, each call is its own run (never appended to an old one).
        run_id = args["run_id"] or "adhoc-%s-%s" % (utc_now()[:19].replace(":", ""), uuid.uuid4().hex[:6])
        run_dir = args["run_dir"] or "%s/scapforge-runs/%s" % (task_vars.get("playbook_dir", "."), run_id)
        opts = LoopOptions(
            **{name: args[name] for name in _PASSED_AS_IS},
            run_dir=run_dir,
            run_id=run_id,
            llm=LLMConfig.from_options(args["llm_base_url"], args["llm_model"], args["llm_api_key"],
                                       args["llm_timeout"], args["llm_allow_remote"]),
            budget=Budget(attempts=args["llm_max_attempts"], probes=args["llm_max_probes"],
                          seconds=args["llm_rule_seconds"], tokens=args["llm_rule_tokens"],
                          review_every=args["llm_review_every"]),
            run_tokens=args["llm_run_tokens"],
            max_answer_tokens=args["llm_max_tokens"],
            memory_mode=self._memory_mode(args["memory_mode"]),
        )
        session = ActionSession(self, task_vars)
        loop = RemediationLoop(session, opts)
        try:
            self._refuse_check_over_a_run(session.check_mode, run_dir, run_id, session.host)
            if opts.llm.configured:
                opts.prompts = self._prompts(args["skill"], args["llm_prompts"])
            report = loop.run()
        except ControllerGone as exc:  # nobody listens any more; a resumed run settles what is open
            raise AnsibleActionFail(str(exc)) from None
        except LoopError as exc:
            kept = self._write_error(loop, run_dir, run_id, task_vars, exc.reason, str(exc))
            raise AnsibleActionFail("%s (reason: %s)%s" % (exc, exc.reason, kept), result={"reason": exc.reason})
        except Exception as exc:  # a bug or an unexpected host answer: keep what was done, then fail
            self._write_error(loop, run_dir, run_id, task_vars, "internal", "%s: %s" % (type(exc).__name__, exc))
            raise
        finally:
            session.remove_tmp()  # a dead connection must not hide the run's own result

        result.update(
            changed=loop.changed,
            before=report["before"],
            after=report["after"],
            outcomes=report["outcomes"],
            regressions=report["regressions"],
            picked_up_by_rescan=report["picked_up_by_rescan"],
            stopped=report["stopped"],
            scan_failed=report.get("scan_failed"),
            report="%s/hosts/%s.json" % (run_dir, report["host"]),
            run_dir=run_dir,
        )
        if report["stopped"]:
            result["failed"] = True
            result["msg"] = "host stopped: %s" % report["stopped"]
        return result

    @staticmethod
    def _memory_mode(value) -> str:
        """``off``, ``shadow`` or ``inject``; YAML's unquoted ``off`` (boolean false) is ``off``."""
        if value is False or str(value).strip().lower() in ("off", "false", "no"):
            return "off"
        mode = str(value).strip().lower()
        if mode not in ("shadow", "inject"):
            raise AnsibleActionFail("memory_mode must be off, shadow or inject, got %r" % (value,))
        return mode

    @staticmethod
    def _prompts(skill: str, overrides: dict) -> PromptSet:
        """The skill's agent prompts with the inventory's overrides; LoopError(``skill``,
        ``prompts``)."""
        try:
            return PromptSet(load_skill(skill).prompts_dir, overrides)
        except SkillError as exc:
            raise LoopError("skill", str(exc)) from None
        except PromptError as exc:
            raise LoopError("prompts", str(exc)) from None

    @staticmethod
    def _old_report(run_dir: str, host: str) -> tuple[str, dict | None]:
        """(path, the host's report an earlier start of this run id wrote, or None)."""
        path = os.path.join(run_dir, "hosts", "%s.json" % host)
        try:
            with open(path, encoding="utf-8") as handle:
                existing = json.load(handle)
        except (OSError, ValueError):
            existing = None
        return path, existing if isinstance(existing, dict) else None

    @staticmethod
    def _refuse_check_over_a_run(check_mode: bool, run_dir: str, run_id: str, host: str) -> None:
        """A --check start would write its plan over the report of a run that changed the
        host (check mode neither resumes nor records progress): LoopError(``run_id``)."""
        path, existing = ActionModule._old_report(run_dir, host)
        if check_mode and decisions.keep_old_report(existing, False) and not (existing or {}).get("check_mode"):
            raise LoopError("run_id", "run %s already has a report for %s (%s): a --check start with its id would "
                                      "replace it; use a new scapforge_run_id" % (run_id, host, path))

    @staticmethod
    def _write_error(loop, run_dir, run_id, task_vars, reason, message) -> str:
        """The host's report and a run_error event for a run that could not start or go on,
        with the outcomes of the rules worked so far (nothing done is lost). A start that
        changed nothing leaves the report of an earlier start of this run id as it was
        (``decisions.keep_old_report``: run ids never erase); returns what to add to the
        error's message then ("" otherwise)."""
        host = task_vars.get("inventory_hostname", "localhost")
        path, existing = ActionModule._old_report(run_dir, host)
        if decisions.keep_old_report(existing, loop.changed):
            loop.events.emit("run_error", reason=reason, msg=message, rules_done=0, report_kept=path)
            return ("; run %s already has a report for %s (%s), kept as it was: this start changed nothing. Use a "
                    "new scapforge_run_id, or run again with this one and working options to resume it"
                    % (run_id, host, path))
        report = error_report(host, run_id, reason, message)
        report["rules"] = {r: o.to_dict() for r, o in sorted(loop.outcomes.items())}
        write_host_report(run_dir, host, report)
        loop.events.emit("run_error", reason=reason, msg=message, rules_done=len(loop.outcomes))
        return ""
