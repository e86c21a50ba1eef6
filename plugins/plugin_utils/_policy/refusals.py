# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate's refusals: a machine-readable code beside each human message (controller only).

The gate (:func:`..task_gate.refusals`) says why a task list may not run twice over: in
words for the Worker and the report, and as a code for the code that reads refusals (the
memory's lessons, issue 16: never the gate's prose).  The codes are a closed list:
:data:`CODES`.  A refusal's ``subject`` holds the values its code is about (the module
that is not allowlisted), so that a reader can say the same thing again without parsing
the message.
"""
from __future__ import annotations

import dataclasses
import typing as t

__all__ = [
    'BAD_ARGUMENTS', 'BAD_STRUCTURE', 'BAD_TASK', 'BANNED_PATTERN', 'CODES', 'CONTROLLER_FILE', 'DENIED_MODULE',
    'GATE_ERROR', 'JINJA_UNTRUSTED', 'NOT_ALLOWLISTED', 'PARSE_ERROR', 'RESERVED_VARS', 'TOUCHES_ACCESS',
    'UNKNOWN_MODULE', 'UNREADABLE_COMMAND', 'UNSAFE_EXPRESSION', 'UNSUPPORTED_KEYWORD', 'UNSUPPORTED_PARAMETERS',
    'WRITES_OUTSIDE', 'Hazard', 'Refusal',
]

# --- the task list and its tasks
BAD_STRUCTURE = 'bad_structure'              # not a list of mappings, an empty list or block, a key not a string
PARSE_ERROR = 'parse_error'                  # the text is not YAML, or Ansible cannot load the tasks
BAD_TASK = 'bad_task'                        # no module key, two of them, arguments the parser refuses
UNSUPPORTED_KEYWORD = 'unsupported_keyword'  # a keyword, loop or register the executor does not implement
UNKNOWN_MODULE = 'unknown_module'            # subject: (name as written, a guess or '')
DENIED_MODULE = 'denied_module'              # subject: (fqcn,)
NOT_ALLOWLISTED = 'not_allowlisted'          # subject: (fqcn,)
UNSUPPORTED_PARAMETERS = 'unsupported_parameters'  # subject: (fqcn, 'a, b')
BAD_ARGUMENTS = 'bad_arguments'              # internal or variable arguments, a value outside the choices
GATE_ERROR = 'gate_error'                    # the gate could not check the task (a bug): refused
# --- untrusted (model-written) tasks only
JINJA_UNTRUSTED = 'jinja_untrusted'
RESERVED_VARS = 'reserved_vars'              # ansible_* variables
UNSAFE_EXPRESSION = 'unsafe_expression'      # a conditional or expression argument outside the safe language
CONTROLLER_FILE = 'controller_file'          # src: a file on the controller
# --- the banned patterns (untrusted_policy.task_hazards)
WRITES_OUTSIDE = 'writes_outside'            # writes under /boot, /proc or /sys (sysctl -w, sysctl_set)
TOUCHES_ACCESS = 'touches_access'            # sshd, the network, the connecting user, its keys, sudo, access packages
BANNED_PATTERN = 'banned_pattern'            # reboots, broad removals, unmounts, packages from outside, use:
UNREADABLE_COMMAND = 'unreadable_command'    # a command line the gate cannot split or check

CODES = frozenset({
    BAD_STRUCTURE, PARSE_ERROR, BAD_TASK, UNSUPPORTED_KEYWORD, UNKNOWN_MODULE, DENIED_MODULE, NOT_ALLOWLISTED,
    UNSUPPORTED_PARAMETERS, BAD_ARGUMENTS, GATE_ERROR, JINJA_UNTRUSTED, RESERVED_VARS, UNSAFE_EXPRESSION,
    CONTROLLER_FILE, WRITES_OUTSIDE, TOUCHES_ACCESS, BANNED_PATTERN, UNREADABLE_COMMAND,
})


@dataclasses.dataclass(frozen=True)
class Hazard:
    """One banned pattern a task shows: its code and the reason in words."""

    code: str
    text: str

    def prefixed(self, prefix: str) -> 'Hazard':
        return Hazard(self.code, prefix + self.text)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One reason the gate refuses a task list.

    code: one of :data:`CODES`; problem: what is wrong, in words, without the task's label;
    task: the label (``task 2 'Set banner'``), '' for the list as a whole; subject: the
    values the code is about (strings; see the code's comment above).
    """

    code: str
    problem: str
    task: str = ''
    subject: tuple = ()

    @property
    def message(self) -> str:
        """The human message, as the gate has always worded it: ``task 2 'x': problem``."""
        return f'{self.task}: {self.problem}' if self.task else self.problem

    def to_dict(self) -> dict:
        return {'code': self.code, 'task': self.task, 'problem': self.problem, 'subject': list(self.subject)}

    @classmethod
    def from_dict(cls, data: t.Any) -> 'Refusal | None':
        """A refusal from :meth:`to_dict`'s dict; None for anything else (an old or odd record)."""
        if not isinstance(data, dict) or not isinstance(data.get('code'), str):
            return None
        subject = data.get('subject')
        return cls(code=data['code'], problem=str(data.get('problem') or ''), task=str(data.get('task') or ''),
                   subject=tuple(str(s) for s in subject) if isinstance(subject, (list, tuple)) else ())
