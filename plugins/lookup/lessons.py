# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup plugin scapforge.remediation.lessons: read the lessons of a memory store (issue 6, item 9)."""

from __future__ import annotations

DOCUMENTATION = r"""
    name: lessons
    author: scapforge maintainers (@scapforge)
    version_added: "0.1.0"
    short_description: Read the lessons the remediation loop learned, from a memory store
    description:
      - Returns the lessons of the memory store written by M(scapforge.remediation.ralph)
        (a directory of TinyDB JSON files on the controller), with their kind, status, scope,
        cue, action, support, weight, confidence and outcomes, optionally with the evidence
        rows each lesson rests on.
      - Runs on the controller and only reads. It takes no lock and writes nothing; a store
        that another run is writing is read as it was when each table file was opened.
      - A store at an older schema is refused (reading it would migrate it); the next run with
        memory on, or M(scapforge.remediation.memory_merge) into it, migrates it.
      - Lessons are ordered by skill, category, rule (skill-wide lessons first), kind
        (positive, negative, caution) and id.
    options:
      _terms:
        description:
          - Lesson ids (C(L) and 12 hex digits) to return. Without terms every lesson that
            passes the other filters is returned.
        required: false
        type: list
        elements: str
      path:
        description: The memory store directory (V(~) is expanded).
        type: path
        default: ~/.scapforge/memory
        vars:
          - name: scapforge_memory_path
        env:
          - name: SCAPFORGE_MEMORY_PATH
      skill:
        description: Only lessons of this skill (C(scope.skill)), for example V(anssi-debian12).
        type: str
      category:
        description:
          - Only lessons of this rule category (C(scope.category)), for example V(ssh).
          - Skill-wide lessons (a task-shape cause, an environment caution) have no category
            and are left out by this filter; find them with O(rule).
        type: str
      rule:
        description:
          - Only lessons about this XCCDF rule (short id, or the full
            C(xccdf_org.ssgproject.content_rule_) id) - the lesson's own rule, or a rule its
            evidence names (a skill-wide caution appears under every rule it was seen on).
        type: str
      kind:
        description: Only lessons of this kind.
        type: str
        choices: [positive, negative, caution]
      status:
        description:
          - Only lessons with one of these statuses. V(all) means every status.
          - The default leaves out V(retired) lessons, which are kept for their evidence but
            never shown to the loop (seed 004).
        type: list
        elements: str
        default: [candidate, confirmed]
      with_evidence:
        description: Add each lesson's evidence rows under C(evidence).
        type: bool
        default: false
    notes:
      - Use C(query) or C(wantlist=true); with C(lookup) one lesson comes back as a
        dictionary rather than a list of one.
      - A store that does not exist (nothing learned yet) gives an empty list.
      - A table file that is not valid JSON fails the lookup with an error naming the table;
        the file is left in place (the next run's transaction moves it aside).
      - The same listing from a shell - C(.venv/bin/python tools/lessons.py list).
    seealso:
      - module: scapforge.remediation.memory_merge
"""

EXAMPLES = r"""
- name: Everything learned about one rule, with the evidence
  ansible.builtin.debug:
    msg: "{{ query('scapforge.remediation.lessons', rule='sysctl_kernel_dmesg_restrict', with_evidence=true) }}"

- name: Confirmed caution lessons of a skill, from a store on a persistent volume
  ansible.builtin.debug:
    msg: "{{ query('scapforge.remediation.lessons', path='/var/lib/awx/scapforge-memory', skill='anssi-debian12',
             kind='caution', status='confirmed') | map(attribute='cue') }}"

- name: Two lessons by id, retired or not
  ansible.builtin.set_fact:
    picked: "{{ query('scapforge.remediation.lessons', 'L0123456789ab', 'Lba9876543210', status='all') }}"
"""

RETURN = r"""
  _list:
    description: One dictionary per lesson, the stored lesson document.
    type: list
    elements: dict
    contains:
      id:
        description: Lesson id, C(L) and the first 12 hex digits of its dedupe key (the same in every store).
        type: str
      kind:
        description:
          - V(positive) (a fix that verified), V(negative) (an approach that failed, with its
            cause) or V(caution) (the environment stops the rule).
        type: str
      status:
        description:
          - V(candidate) (a Reflector lesson not yet confirmed by an outcome), V(confirmed) or
            V(retired).
        type: str
      scope:
        description:
          - C(skill), C(category) and C(rule) (short id); category and rule are null for a
            skill-wide lesson.
        type: dict
      cue:
        description: When the lesson applies, one line.
        type: str
      action:
        description: What it says to do or avoid, one line.
        type: str
      fingerprint:
        description: The environment it holds for - os, os_version, virtualization, content_version, skill.
        type: dict
      tasks:
        description:
          - For a positive lesson the tasks that verified; for a rule-specific negative one the
            tasks that failed; else null.
        type: list
      reason:
        description:
          - The outcome reason it records (for a caution, the one the loop reuses, for example
            C(environment:read_only_proc_sys)).
        type: str
      support:
        description: Number of evidence rows.
        type: int
      weight:
        description:
          - Ranking weight in [0, 1] - 0.5 at first, +0.1 when shown and the rule was then
            remediated, -0.05 when it escalated (seed 000).
        type: float
      confidence:
        description: Confidence in [0, 1] from the status and the category credit of the last dream pass.
        type: float
      outcomes:
        description: Work items it was shown for that counted - C(remediated) and C(escalated).
        type: dict
      rules:
        description: Per rule named by its evidence, the latest reason and the content's own fix's reason.
        type: dict
      created:
        description: When it was first recorded, ISO 8601 UTC.
        type: str
      updated:
        description: When it last gained evidence or changed status, ISO 8601 UTC.
        type: str
      evidence:
        description:
          - Only with O(with_evidence). Its evidence rows, oldest first - C(source_kind) (outcome, attempt,
            reflection), C(source_id) (C(<run_id>/<host>/<rule>[/<attempt>])), C(run_id), C(host), C(time),
            C(rule), C(attempt), C(source), C(reason), C(tasks_sha), C(detail).
        type: list
        elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import admin
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import MemoryStoreError


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        deps.require("filelock", "tinydb", error=AnsibleLookupError)
        self.set_options(var_options=variables, direct=kwargs)
        path = self.get_option("path")
        try:
            return admin.list_lessons(
                path,
                skill=self.get_option("skill"),
                category=self.get_option("category"),
                rule=self.get_option("rule"),
                kind=self.get_option("kind"),
                status=self.get_option("status"),
                ids=[str(term) for term in terms] if terms else None,
                with_evidence=self.get_option("with_evidence"),
            )
        except (MemoryStoreError, ValueError) as exc:
            raise AnsibleLookupError("memory store %s: %s" % (path, exc)) from exc
