# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of scapforge.remediation.ralph, defined once (issue 10 item 6).

``ARGUMENT_SPEC`` is Ansible's argument spec format (``AnsibleModule(argument_spec=...)``,
``ActionBase.validate_argument_spec``): {option: {type, elements, default, choices,
required, no_log}}. The action plugin (plugins/action/ralph.py) validates the task's
arguments with it; the module stub (plugins/modules/ralph.py) hands it to AnsibleModule, so
``ansible-test sanity``'s validate-modules compares it with the module's DOCUMENTATION.
tests/unit/test_option_agreement.py checks that the documentation, this spec, the role's
meta/argument_specs.yml, defaults/main.yml and the option mapping in tasks/main.yml agree.
"""

from __future__ import annotations

#: ``no_log: False`` on the token budgets: counts of LLM tokens, not secrets (validate-modules
#: flags option names containing "token").
ARGUMENT_SPEC = {
    "datastream": {"type": "str", "required": True},
    "profile": {"type": "str", "required": True},
    "datastream_src": {"type": "path"},
    "tailoring_src": {"type": "path"},
    "trusted_sha256": {"type": "list", "elements": "str", "default": []},
    "rules": {"type": "list", "elements": "str", "default": []},
    "skip_rules": {"type": "list", "elements": "str", "default": []},
    "waivers": {"type": "list", "elements": "dict", "default": []},
    "allow_access_impacting": {"type": "list", "elements": "str", "default": []},
    "health_check": {"type": "bool", "default": True},
    "rescan": {"type": "bool", "default": True},
    "run_dir": {"type": "path"},
    "run_id": {"type": "str"},
    "time_budget": {"type": "float", "default": 0},
    "verify_batch": {"type": "int", "default": 8},
    "scan_timeout": {"type": "int", "default": 0},
    "skill": {"type": "str", "default": "anssi-debian12"},
    "skill_description": {"type": "str", "default": ""},
    "llm_base_url": {"type": "str"},
    "llm_model": {"type": "str"},
    "llm_api_key": {"type": "str", "no_log": True},
    "llm_timeout": {"type": "float", "default": 120},
    "llm_allow_remote": {"type": "bool", "default": False},
    "llm_prompts": {"type": "dict", "default": {}},
    "llm_max_attempts": {"type": "int", "default": 5},
    "llm_max_probes": {"type": "int", "default": 6},
    "llm_rule_seconds": {"type": "float", "default": 900},
    "llm_rule_tokens": {"type": "int", "default": 60000, "no_log": False},
    "llm_run_tokens": {"type": "int", "default": 2000000, "no_log": False},
    "llm_review_every": {"type": "int", "default": 3},
    "llm_max_tokens": {"type": "int", "default": 2000, "no_log": False},
    "memory_path": {"type": "path", "default": "~/.scapforge/memory"},
    "memory_mode": {"type": "raw", "default": "inject"},
    "memory_retry": {"type": "bool", "default": False},
    "allow_controller": {"type": "bool", "default": False},
    "health_commands": {"type": "list", "elements": "str", "default": []},
    "deadman_seconds": {"type": "int", "default": 600},
    "allow_reboot": {"type": "bool", "default": False},
    "checkpoint_provider": {"type": "str", "default": "files", "choices": ["files", "command", "lab"]},
    "checkpoint_options": {"type": "dict", "default": {}},
}
