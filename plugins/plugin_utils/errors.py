# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one base of the controller engine's exceptions (issue 16 item 4).

As kubernetes.core's ``module_utils/k8s/exceptions.py``: every exception class under
plugins/plugin_utils and plugins/action derives from :class:`ScapforgeError`, so a caller can
catch the engine's own failures as one family, and every one carries a machine-readable
``kind`` beside its human message. Code decides on ``kind`` (or a class), never on the
message's words: the message is for people and may be reworded at any time.

Each class stays in the module it belongs to (its import path is unchanged); it only derives
from this base. The kinds:

=================================  ===========================================================
class (module)                     ``kind``
=================================  ===========================================================
LoopError (host_setup)             its ``reason``: content, content_mismatch, untrusted_content,
                                   tailoring, profile, rule, facts, unhealthy_before,
                                   scan_failed, scanner_crash, llm_remote, prompts, memory,
                                   controller, checkpoint, waiver, skill
ScanError (_run.verifier)          a LoopError of a whole scan: scan_failed, scanner_crash or
                                   environment:<kind> (``decisions.whole_scan_failure``)
ControllerGone (host_setup)        ``controller_gone``
LLMError (llm)                     one of ``llm.ERROR_KINDS``
CheckpointError (checkpoint)       the module's ``error_kind`` (missing, exists, root_unsafe,
                                   corrupt, io_error, bad_id), or connection, closed,
                                   unsupported, bad_options, snapshot_failed, discard_failed;
                                   ``module_failed`` when the module gave none
HealthError (health)               ``baseline``
CatalogError (catalog)             ``content``
SkillError (skills)                ``skill``
PromptError (prompts)              ``prompts``
WaiverError (waivers)              ``waiver``
ProbeRefused (probes)              ``probe_refused``
AnswerError (answers)              ``bad_answer``
ShellParseError (shell_split)      ``shell_parse``
TaskParseError (task_gate)         ``task_parse``
LessonError (memory.lessons)       ``lesson``
MemoryStoreError (memory.errors)   ``memory``; MemoryCorrupt ``memory_corrupt``,
                                   MemorySchemaError ``memory_schema``, MemoryLockBusy ``memory_busy``
_CorruptFile (memory.store)        ``corrupt_file`` (internal: becomes MemoryCorrupt)
_Cut (memory.store)                ``recovery_cut`` (internal to the recovery scan of repair)
ChecklistError (report_ckl)       ``checklist``
EvidenceError (evidence)          ``evidence``
=================================  ===========================================================

Classes that were ValueErrors stay ValueErrors too (callers catch ``ValueError``). None is
raised to Ansible as is: the action plugins turn them into ``AnsibleActionFail``.

Target-side code (plugins/modules, plugins/module_utils: the target's Python, stdlib only)
does not import this module: its failures travel as the module result's ``error_kind``
(``CheckpointFailed.error_kind``, oscap_eval's ``ScanFailed``), which the controller
carries on as the kind of the exception it raises (``CheckpointError``).
"""

from __future__ import annotations


class ScapforgeError(Exception):
    """A failure of the engine, with a machine-readable ``kind`` (a short snake_case code).

    ``kind`` defaults to the class's own (a class attribute); a subclass whose failures come
    in several kinds passes one per raise. ``message``: the human-readable text (``str(exc)``).
    """

    #: the class's kind when a raise names none
    kind: str = "error"

    def __init__(self, message: str = "", *, kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind

    @property
    def message(self) -> str:
        return str(self)
