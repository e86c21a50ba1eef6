# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup plugin scapforge.remediation.skill: a validated skill's data, by name (issue 8)."""

from __future__ import annotations

DOCUMENTATION = r"""
    name: skill
    author: scapforge maintainers (@scapforge)
    version_added: "0.2.0"
    short_description: Load a remediation skill of the collection by name, validated
    description:
      - Returns the data of the skill C(skills/<name>/skill.yml) of the installed collection,
        validated against the skill schema (plugins/plugin_utils/skills.py). A skill that does
        not validate fails the lookup with a message naming the file and the key; an unknown
        name fails with the list of skills the collection has.
      - The role C(scapforge.remediation.remediate) uses it for the datastream path, the
        default profile, the packages that provide oscap and the content per OS family, and the
        trusted datastream digests.
    options:
      _terms:
        description: The skill's name, for example V(stig-rhel9).
        required: true
        type: list
        elements: str
"""

EXAMPLES = r"""
- name: The DISA STIG skill's default profile
  ansible.builtin.debug:
    msg: "{{ lookup('scapforge.remediation.skill', 'stig-rhel9').profile }}"
"""

RETURN = r"""
  _raw:
    description:
      - One dict per name - C(name), C(description), C(os_families), C(profile), C(datastream)
        (path), C(trusted_sha256), C(content_packages) and C(scanner_packages) (each a dict of
        OS family to package names), C(directory) (the skill's folder on the controller).
    type: list
    elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils.skills import SkillError, load_skill


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        deps.require("jsonschema", error=AnsibleLookupError)
        self.set_options(var_options=variables, direct=kwargs)
        out = []
        for name in terms:
            try:
                skill = load_skill(str(name))
            except SkillError as exc:
                raise AnsibleLookupError(str(exc)) from None
            data = skill.data
            out.append({
                "name": skill.name,
                "description": skill.description,
                "os_families": list(data["os_families"]),
                "profile": skill.profile,
                "datastream": skill.datastream_path,
                "trusted_sha256": skill.trusted_sha256,
                "content_packages": dict(data["datastream"].get("packages") or {}),
                "scanner_packages": dict(data.get("scanner_packages") or {}),
                "directory": skill.directory,
            })
        return out
