# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of scapforge.remediation.run_summary, defined once (as ralph_options.py is for
ralph): the action plugin validates its task's arguments with ``ARGUMENT_SPEC``, the module
stub hands it to AnsibleModule (validate-modules compares it with the DOCUMENTATION), and
tests/unit/test_option_agreement.py checks the role's variables against it.
"""

from __future__ import annotations

#: ``no_log: False`` on evidence_key: a path to the key, not the key (validate-modules flags
#: option names containing "key").
ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "hosts": {"type": "list", "elements": "str", "default": []},
    "datastream_src": {"type": "path"},
    "evidence_key": {"type": "path", "no_log": False},
}
