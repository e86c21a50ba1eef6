"""The ``llm-output`` cases of ../shared/cases/cases.yml, their inputs verbatim (the tests
that gate, run and judge them import these, so the inputs live in one place)."""


LLM_YAML_UNQUOTED_COLON = """\
- name: Set banner
  ansible.builtin.copy:
    dest: /etc/issue.net
    content: Authorized uses only: all activity logged
"""
LLM_COMMAND_WARN_ARG = """\
- ansible.builtin.command: update-grub
  args:
    warn: false
"""
LLM_INVENTED_MODULE = """\
- ansible.builtin.sysctl_setting:
    name: kernel.dmesg_restrict
    value: "1"
"""
LLM_PIPEFAIL_UNDER_DASH = """\
- ansible.builtin.shell: set -o pipefail && grep -c x /etc/passwd | head -1
"""
LLM_BACKREFS_NOOP = """\
- name: Watch /etc/passwd
  ansible.builtin.lineinfile:
    path: /etc/audit/rules.d/audit.rules
    regexp: '^-w /etc/passwd.*$'
    line: '-w /etc/passwd -p wa -k audit_rules_usergroup_modification'
    backrefs: true
"""
