# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of scapforge.remediation.check_inputs, defined once (as for ralph): the action
plugin validates its task's arguments with ``ARGUMENT_SPEC``, the module stub hands it to
AnsibleModule (validate-modules compares it with the DOCUMENTATION)."""

from __future__ import annotations

ARGUMENT_SPEC = {
    "datastream_src": {"type": "path"},
    "tailoring_src": {"type": "path"},
    "profile": {"type": "str", "default": ""},
    "rules": {"type": "list", "elements": "str", "default": []},
    "skip_rules": {"type": "list", "elements": "str", "default": []},
    "allow_access_impacting": {"type": "list", "elements": "str", "default": []},
    "waivers": {"type": "list", "elements": "dict", "default": []},
    "llm_base_url": {"type": "str"},
    "llm_model": {"type": "str"},
    "llm_allow_remote": {"type": "bool", "default": False},
    "content_dir": {"type": "str", "default": "/var/lib/scapforge/content"},
    "run_dir": {"type": "path"},
    "run_id": {"type": "str"},
}
