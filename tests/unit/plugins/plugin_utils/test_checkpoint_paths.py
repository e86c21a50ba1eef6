"""paths_touched (plugins/plugin_utils/checkpoint.py): what a task can change, per module.

Pure logic, nothing runs on any host. Option names and defaults are the modules' own
(DOCUMENTATION of ansible-core 2.19, ansible.posix, community.general in .venv); the last
tests walk every Ansible fix of the SSG Debian 12 datastream.
"""
import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import (
    PROVIDERS, CheckpointError, FilesProvider, RestoreResult, Touched, canonical_module, normalise_path,
    paths_touched)

ACCOUNTS = ["/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow"]
DATASTREAM = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"), "content", "ssg-debian12-ds.xml")


def touched(fqcn, **args):
    return paths_touched(fqcn, args)


# ---------------------------------------------------------------- file editors

@pytest.mark.parametrize("module", ["ansible.builtin.lineinfile", "ansible.builtin.blockinfile",
                                    "ansible.builtin.replace"])
@pytest.mark.parametrize("key", ["path", "dest", "destfile", "name"])
def test_file_editors_take_path_and_its_aliases(module, key):
    t = paths_touched(module, {key: "/etc//login.defs", "regexp": "^UMASK", "line": "UMASK 077"})
    assert t == Touched(paths=["/etc/login.defs"])


def test_paths_are_normalised():
    assert touched("ansible.builtin.lineinfile", path="/etc/ssh/../login.defs").paths == ["/etc/login.defs"]
    assert touched("ansible.builtin.lineinfile", path="//etc/x/").paths == ["/etc/x"]
    assert normalise_path("/a/./b//c/") == "/a/b/c"


@pytest.mark.parametrize("value, why", [
    ("login.defs", "path login.defs is not absolute"),
    ("~/.bashrc", "path ~/.bashrc depends on the target environment (~ or $VAR)"),
    ("$HOME/.bashrc", "path $HOME/.bashrc depends on the target environment (~ or $VAR)"),
])
def test_paths_the_controller_cannot_resolve_are_unknown(value, why):
    t = touched("ansible.builtin.lineinfile", path=value, line="x")
    assert t.paths == [] and t.unknown == "ansible.builtin.lineinfile path: " + why


def test_missing_path_is_unknown():
    assert touched("ansible.builtin.replace", regexp="x").unknown == "ansible.builtin.replace: no path given"


def test_ini_file_path_and_dest():
    assert touched("community.general.ini_file", path="/etc/dnf/dnf.conf", section="main").paths == ["/etc/dnf/dnf.conf"]
    assert touched("community.general.ini_file", dest="/etc/x.ini").paths == ["/etc/x.ini"]


def test_assemble_dest():
    assert touched("ansible.builtin.assemble", src="/etc/audit/rules.d", dest="/etc/audit/audit.rules") == \
        Touched(paths=["/etc/audit/audit.rules"])


# ---------------------------------------------------------------- copy, template, unarchive

def test_copy_dest_file():
    assert touched("ansible.builtin.copy", content="x\n", dest="/etc/issue").paths == ["/etc/issue"]


def test_copy_into_a_directory_lands_at_basename_of_src():
    assert touched("ansible.builtin.copy", src="files/banner.txt", dest="/etc/issue.d/").paths == \
        ["/etc/issue.d/banner.txt"]
    # a source directory without trailing slash is copied as a directory of that name
    assert touched("ansible.builtin.copy", src="conf.d", dest="/etc/app/").paths == ["/etc/app/conf.d"]


def test_copy_directory_contents_cover_the_whole_dest_directory():
    assert touched("ansible.builtin.copy", src="conf.d/", dest="/etc/app/").paths == ["/etc/app"]
    assert touched("ansible.builtin.copy", src="/srv/x", remote_src=True, dest="/etc/x").paths == ["/etc/x"]


def test_template_dest():
    assert touched("ansible.builtin.template", src="sshd.j2", dest="/etc/ssh/sshd_config").paths == \
        ["/etc/ssh/sshd_config"]
    assert touched("ansible.builtin.template", src="t/motd.j2", dest="/etc/").paths == ["/etc/motd.j2"]


def test_unarchive_dest_directory_in_full():
    assert touched("ansible.builtin.unarchive", src="x.tgz", dest="/opt/app") == Touched(paths=["/opt/app"])


# ---------------------------------------------------------------- file

@pytest.mark.parametrize("args, paths, shallow", [
    ({"path": "/etc/cron.d", "state": "directory", "mode": "0700"}, [], ["/etc/cron.d"]),
    ({"path": "/var/log", "owner": "root"}, [], ["/var/log"]),
    ({"dest": "/etc/shadow", "mode": "0640", "state": "file"}, [], ["/etc/shadow"]),
    ({"name": "/etc/x", "state": "touch"}, [], ["/etc/x"]),
    ({"path": "/etc/x.d", "state": "absent"}, ["/etc/x.d"], []),
    ({"path": "/etc/x.d", "state": "directory", "recurse": True, "mode": "u=rwX"}, ["/etc/x.d"], []),
    ({"path": "/etc/x.d", "state": "directory", "recurse": "yes"}, ["/etc/x.d"], []),
    ({"path": "/etc/localtime", "src": "/usr/share/zoneinfo/UTC", "state": "link"}, ["/etc/localtime"], []),
    ({"path": "/etc/h", "src": "/etc/hosts", "state": "hard"}, ["/etc/h"], []),
])
def test_file_states(args, paths, shallow):
    t = paths_touched("ansible.builtin.file", args)
    assert (t.paths, t.shallow, t.unknown, t.read_only) == (paths, shallow, None, False)


# ---------------------------------------------------------------- cron, user, group

def test_cron_file_relative_is_under_etc_cron_d():
    assert touched("ansible.builtin.cron", name="aide", cron_file="aide", user="root", job="x").paths == \
        ["/etc/cron.d/aide"]
    assert touched("ansible.builtin.cron", name="x", cron_file="/etc/cron.d/y", user="root").paths == \
        ["/etc/cron.d/y"]


def test_cron_without_cron_file_is_a_users_crontab_file_in_either_spool():
    t = touched("ansible.builtin.cron", name="x", job="true", user="bob")
    assert t.paths == ["/var/spool/cron/crontabs/bob", "/var/spool/cron/bob"] and t.unknown is None
    # issue 17: aide_periodic_cron_checking's entry, user root, is saved as root's crontab file
    assert touched("ansible.builtin.cron", name="run AIDE check", job="/usr/sbin/aide --check").paths == \
        ["/var/spool/cron/crontabs/root", "/var/spool/cron/root"]
    odd = touched("ansible.builtin.cron", name="x", job="true", user="../etc")
    assert odd.paths == [] and odd.unknown == "crontab of user '../etc' (ansible.builtin.cron without cron_file)"


def test_user_defaults_cover_account_files_and_note_the_home():
    t = touched("ansible.builtin.user", name="bob")
    assert t.paths == ACCOUNTS + ["/etc/subuid", "/etc/subgid"]
    assert t.unknown == "home directory of user bob (create_home/move_home without home)"


def test_user_with_home_covers_it():
    t = touched("ansible.builtin.user", name="bob", home="/srv/bob/")
    assert t.paths == ACCOUNTS + ["/etc/subuid", "/etc/subgid", "/srv/bob"] and t.unknown is None


def test_user_without_home_creation_is_fully_known():
    t = touched("ansible.builtin.user", name="svc", create_home=False, shell="/usr/sbin/nologin")
    assert t == Touched(paths=ACCOUNTS + ["/etc/subuid", "/etc/subgid"])
    assert touched("ansible.builtin.user", name="svc", createhome="no").unknown is None


def test_user_remove_move_home_and_ssh_key_are_unknown():
    assert touched("ansible.builtin.user", name="bob", state="absent", remove=True).unknown == \
        "home directory and mail spool of user bob removed (remove)"
    assert touched("ansible.builtin.user", name="bob", state="absent").unknown is None
    t = touched("ansible.builtin.user", name="bob", home="/home/b2", move_home=True, generate_ssh_key=True)
    assert t.paths[-1] == "/home/b2"
    assert t.unknown == "previous home directory of user bob (move_home); SSH key of user bob (generate_ssh_key)"


def test_group():
    assert touched("ansible.builtin.group", name="sftponly") == Touched(paths=["/etc/group", "/etc/gshadow"])


# ---------------------------------------------------------------- ansible.posix, community.general

def test_sysctl_default_file_and_runtime_value():
    t = touched("ansible.posix.sysctl", name="kernel.dmesg_restrict", value="1")
    assert t.paths == ["/etc/sysctl.conf"]
    assert t.unknown == "runtime value of kernel parameter kernel.dmesg_restrict (ansible.posix.sysctl reload)"


def test_sysctl_file_without_reload_is_fully_known():
    t = touched("ansible.posix.sysctl", name="kernel.x", value="1", sysctl_file="/etc/sysctl.d/90-x.conf",
                reload=False)
    assert t == Touched(paths=["/etc/sysctl.d/90-x.conf"])
    assert touched("ansible.posix.sysctl", key="k", val="1", reload=False, sysctl_set=True).unknown == \
        "runtime value of kernel parameter k (ansible.posix.sysctl reload)"


@pytest.mark.parametrize("state, paths, unknown", [
    ("present", ["/etc/fstab"], None),
    ("absent_from_fstab", ["/etc/fstab"], None),
    ("mounted", ["/etc/fstab"], "mount state of /dev/shm (ansible.posix.mount state=mounted)"),
    ("absent", ["/etc/fstab"], "mount state of /dev/shm (ansible.posix.mount state=absent)"),
    ("remounted", [], "mount state of /dev/shm (ansible.posix.mount state=remounted)"),
    ("ephemeral", [], "mount state of /dev/shm (ansible.posix.mount state=ephemeral)"),
])
def test_mount(state, paths, unknown):
    t = touched("ansible.posix.mount", path="/dev/shm", src="tmpfs", fstype="tmpfs", opts="nodev", state=state)
    assert (t.paths, t.unknown) == (paths, unknown)


def test_mount_other_fstab():
    assert touched("ansible.posix.mount", name="/mnt", state="present", fstab="/chroot/etc/fstab").paths == \
        ["/chroot/etc/fstab"]


def test_authorized_key():
    t = touched("ansible.posix.authorized_key", user="bob", key="ssh-ed25519 AAA", path="/etc/ssh/keys/bob")
    assert (t.paths, t.shallow, t.unknown) == (["/etc/ssh/keys/bob"], ["/etc/ssh/keys"], None)
    t = touched("ansible.posix.authorized_key", user="bob", key="k", path="/etc/ssh/keys/bob", manage_dir=False)
    assert (t.paths, t.shallow) == (["/etc/ssh/keys/bob"], [])
    t = touched("ansible.posix.authorized_key", user="bob", key="k")
    assert t.paths == [] and t.unknown == "authorized_keys of user bob (ansible.posix.authorized_key without path)"


def test_pamd_sudoers_kernel_blacklist_defaults():
    assert touched("community.general.pamd", name="common-auth", type="auth", control="required",
                   module_path="pam_faillock.so").paths == ["/etc/pam.d/common-auth"]
    assert touched("community.general.pamd", name="sshd", path="/usr/lib/pam.d", type="auth").paths == \
        ["/usr/lib/pam.d/sshd"]
    assert touched("community.general.sudoers", name="scapforge", user="scapforge", commands="ALL").paths == \
        ["/etc/sudoers.d/scapforge"]
    assert touched("community.general.sudoers", name="x", sudoers_path="/etc/sudo.d", commands="ALL").paths == \
        ["/etc/sudo.d/x"]
    assert touched("community.general.kernel_blacklist", name="usb-storage").paths == \
        ["/etc/modprobe.d/blacklist-ansible.conf"]
    assert touched("community.general.kernel_blacklist", name="cramfs", blacklist_file="/etc/modprobe.d/c.conf") \
        .paths == ["/etc/modprobe.d/c.conf"]


def test_pamd_name_must_be_a_file_name():
    assert touched("community.general.pamd", name="../shadow").unknown == \
        "community.general.pamd: name '../shadow' does not name a file"


@pytest.mark.parametrize("module, unknown", [
    ("ansible.builtin.debconf", "debconf database (ansible.builtin.debconf)"),
    ("ansible.builtin.apt", "packages (ansible.builtin.apt)"),
    ("ansible.builtin.dnf", "packages (ansible.builtin.dnf)"),
    ("ansible.builtin.yum", "packages (ansible.builtin.yum)"),
    ("ansible.builtin.package", "packages (ansible.builtin.package)"),
    ("ansible.builtin.service", "service state (ansible.builtin.service)"),
    ("ansible.builtin.systemd", "service state (ansible.builtin.systemd)"),
    ("ansible.builtin.systemd_service", "service state (ansible.builtin.systemd_service)"),
])
def test_not_files(module, unknown):
    assert touched(module, name="aide", state="present") == Touched(unknown=unknown)


@pytest.mark.parametrize("module", ["ansible.builtin.stat", "ansible.builtin.slurp", "ansible.builtin.find",
                                    "ansible.builtin.getent", "ansible.builtin.package_facts",
                                    "ansible.builtin.service_facts", "ansible.builtin.set_fact",
                                    "ansible.builtin.debug", "ansible.builtin.assert", "ansible.builtin.setup"])
def test_read_only_modules(module):
    assert touched(module, path="/etc/shadow") == Touched(read_only=True)


def test_any_other_module_is_unknown():
    assert touched("community.general.timezone", name="UTC") == \
        Touched(unknown="module community.general.timezone: files it changes are not known")


def test_short_and_legacy_names_resolve_like_ansible():
    assert canonical_module("lineinfile") == "ansible.builtin.lineinfile"
    assert canonical_module("ansible.legacy.copy") == "ansible.builtin.copy"
    assert canonical_module("sysctl") == "ansible.posix.sysctl"
    assert canonical_module("pamd") == "community.general.pamd"
    assert canonical_module("stat") == "ansible.builtin.stat"
    assert touched("ini_file", path="/etc/a.ini").paths == ["/etc/a.ini"]


def test_bad_args_never_raise():
    assert paths_touched("ansible.builtin.lineinfile", None).unknown == "ansible.builtin.lineinfile: no path given"
    assert touched("ansible.builtin.copy", dest=["/etc/x"]).unknown.startswith("ansible.builtin.copy dest: not a path")


# ---------------------------------------------------------------- command and shell (heuristic)

def shell(cmd, **extra):
    return paths_touched("ansible.builtin.shell", dict(_raw_params=cmd, **extra))


def test_command_creates_removes_and_their_directories():
    t = paths_touched("ansible.builtin.command", {"cmd": "/usr/sbin/aideinit -y -f", "creates": "/var/lib/aide/aide.db"})
    assert t.paths == ["/var/lib/aide/aide.db", "/var/lib/aide"] and t.heuristic
    t = paths_touched("ansible.builtin.command", {"_raw_params": "true", "removes": "/etc/x.d/old.conf"})
    assert t.paths == ["/etc/x.d/old.conf", "/etc/x.d"]


def test_command_path_tokens_skip_program_directories_and_dev_null():
    t = paths_touched("ansible.builtin.command", {"argv": ["/usr/bin/sed", "-i", "s/^UMASK.*/UMASK 077/",
                                                           "/etc/login.defs", "/usr/sbin/x", "/bin/y"]})
    assert t.paths == ["/etc/login.defs"] and t.unknown is None and t.read_only is False
    t = shell("chmod 0600 /etc/crontab 2>/dev/null && chown root:root /etc/cron.d/ --reference=/etc/hosts")
    assert t.paths == ["/etc/crontab", "/etc/cron.d", "/etc/hosts"]


def test_shell_redirections_and_newlines():
    t = shell("grep -q x /etc/a\necho 'umask 077' >> /etc/profile.d/umask.sh")
    assert t.paths == ["/etc/profile.d/umask.sh"]
    assert shell("cat /etc/a > /etc/b 2>&1").paths == ["/etc/b", "/etc/a"]


def test_sed_patterns_are_not_paths():
    assert shell("sed -i '/^foo/d' /etc/x.conf").paths == ["/etc/x.conf"]


@pytest.mark.parametrize("cmd", [
    'set -o pipefail\nLC_ALL=C grep "^[A-Z][A-Za-z_]*" /etc/aide.conf | grep -v "^ALLXTRAHASHES" | cut -f1 -d \'=\' '
    '| tr -d \' \' | sort -u || true',
    "find -H /usr/lib/  -type f ! -uid 0 -regextype posix-extended -regex \"^.*$\"",
    "find /usr/bin -xdev -perm /6000 -type f 2>/dev/null",
    "awk -F: '!$2 {print $1}' /etc/shadow",
    "findmnt --fstab '/var/tmp'",
    "systemctl -q list-unit-files sshd.socket",
    "sysctl -n kernel.dmesg_restrict",
    "rpm -qi bash",
    "dpkg -s aide",
    "command -v aide",
    "grep '^\\s*GRUB_CMDLINE_LINUX=.*iommu=' /etc/default/grub",
])
def test_probes_are_read_only(cmd):
    t = shell(cmd)
    assert t.read_only is True and t.paths == [] and t.unknown is None, t


@pytest.mark.parametrize("cmd, paths", [
    ("find /etc/ssh -name '*_key' -exec chmod 0600 {} \\;", ["/etc/ssh"]),
    ("find /etc -name '*.bak' -delete", ["/etc"]),
    ("sed -i 's/a/b/' /etc/a", ["/etc/a"]),
    ("sort -o /etc/sorted /etc/in", ["/etc/sorted", "/etc/in"]),
    ("echo x > /etc/issue", ["/etc/issue"]),
    ("sh -c 'chmod 600 /etc/crontab && ls /etc'", ["/etc/crontab"]),
])
def test_writers_are_not_read_only(cmd, paths):
    t = shell(cmd)
    assert t.read_only is False and t.paths == paths


def test_globs_cover_their_directory_and_variables_are_unknown():
    t = shell('for f in /etc/cron.d/*; do chmod 600 "$f"; done')
    assert t.paths == ["/etc/cron.d"]
    assert t.unknown == "paths built from shell variables ($f in ansible.builtin.shell)"
    assert shell("chmod 640 /etc/audit/rules.d/*.rules").paths == ["/etc/audit/rules.d"]


def test_awk_system_is_unknown():
    t = shell("awk -F':' '{ if ($3 >= 1000) system(\"chown -f \" $3\" \"$6\"/.[^\\.]?*\") }' /etc/passwd")
    assert t.paths == ["/etc/passwd"]
    assert t.unknown == "commands built at run time (awk system()) (awk in ansible.builtin.shell)"


def test_volatile_directories_are_shallow():
    t = shell("chmod 1777 /tmp")
    assert (t.paths, t.shallow) == ([], ["/tmp"])
    assert t.unknown == "entries of /tmp, a directory other processes write to, are not saved (ansible.builtin.shell)"


@pytest.mark.parametrize("cmd, paths, unknown", [
    ("/usr/sbin/update-grub", ["/boot/grub/grub.cfg"], None),
    ("/sbin/grubby --update-kernel=ALL", [], "boot loader entries (grubby in ansible.builtin.shell)"),
    ("passwd -l games", ACCOUNTS, None),
    ("useradd -m bob", ACCOUNTS + ["/etc/subuid", "/etc/subgid"], None),
    ("newaliases", ["/etc/aliases.db"], None),
    ("systemctl restart sshd", [], "service state (systemctl in ansible.builtin.shell)"),
    ("sysctl -w kernel.x=1", [], "runtime kernel parameters (sysctl in ansible.builtin.shell)"),
    ("sysctl --system", [], "runtime kernel parameters (sysctl in ansible.builtin.shell)"),
    ("DEBIAN_FRONTEND=noninteractive apt-get install -y aide", [], "packages (apt-get in ansible.builtin.shell)"),
    ("rpm -e telnet", [], "packages (rpm in ansible.builtin.shell)"),
    ("augenrules --load", ["/etc/audit/audit.rules"], "loaded audit rules (augenrules in ansible.builtin.shell)"),
    ("apparmor_parser -q -r /etc/apparmor.d/", ["/etc/apparmor.d"],
     "loaded AppArmor profiles (apparmor_parser in ansible.builtin.shell)"),
    ("sudo -u root tee /etc/issue < /dev/null", ["/etc/issue"], None),
    ("rm -rf /", [], "the root directory / (ansible.builtin.shell): cannot be saved"),
])
def test_known_programs(cmd, paths, unknown):
    t = shell(cmd)
    assert (t.paths, t.unknown, t.read_only) == (paths, unknown, False)


def test_unsplittable_command_line_is_unknown():
    assert shell("cat 'oops").unknown == "ansible.builtin.shell: command line cannot be split (No closing quotation)"


# ---------------------------------------------------------------- provider odds and ends

def test_bad_checkpoint_id_is_refused_before_anything_runs():
    provider = PROVIDERS["files"](session=None, task_vars={})
    assert isinstance(provider, FilesProvider) and provider.name == "files"
    for bad in ("..", "a/b", "", "x" * 129, "a b"):
        with pytest.raises(CheckpointError) as err:
            provider.open(bad)
        assert err.value.kind == "bad_id"
    cp = provider.open("run1-rule_x-1")
    assert cp.to_dict() == {"id": "run1-rule_x-1", "provider": "files", "covered": [], "uncovered": {}, "calls": []}


def test_restore_result_to_dict():
    r = RestoreResult(False, ["/etc/a"], ["/etc/b"], ["/etc/a: mode 0600 != saved 0644"], 0.5, "restored 1")
    assert r.to_dict() == {"verified": False, "restored": ["/etc/a"], "removed": ["/etc/b"],
                           "mismatches": ["/etc/a: mode 0600 != saved 0644"], "seconds": 0.5, "detail": "restored 1"}


# ---------------------------------------------------------------- the SSG Debian 12 fixes

def _fix_tasks():
    from lxml import etree
    xccdf = "http://checklists.nist.gov/xccdf/1.2"
    tree = etree.parse(str(DATASTREAM))
    for fix in tree.iter("{%s}fix" % xccdf):
        if fix.get("system") != "urn:xccdf:fix:script:ansible":
            continue
        text = "".join(fix.itertext())
        try:
            tasks = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        yield fix.getparent().get("id"), tasks


KEYWORDS = {"name", "when", "register", "tags", "loop", "with_items", "changed_when", "failed_when", "check_mode",
            "ignore_errors", "become", "vars", "args", "environment", "no_log", "notify", "loop_control", "until",
            "retries", "delay", "block", "rescue", "always", "with_fileglob", "with_dict", "with_together",
            "with_subelements", "with_list", "with_nested", "with_sequence"}


def _modules(tasks):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if "block" in task:
            yield from _modules(task["block"])
            continue
        for key in task:
            if key not in KEYWORDS:
                yield key


def test_every_module_of_the_ssg_debian12_fixes_is_mapped():
    """No fix of the Debian 12 content falls into 'files it changes are not known'."""
    assert DATASTREAM.is_file(), "SSG content missing: make lab-build unpacks it"
    seen = set()
    for _rule, tasks in _fix_tasks():
        seen.update(_modules(tasks))
    assert {"lineinfile", "find", "file", "sysctl", "mount", "ini_file", "cron"} <= seen  # the walk found them
    for module in sorted(seen):
        t = paths_touched(module, {"path": "/etc/x", "name": "x", "cmd": "true", "cron_file": "x"})
        assert not (t.unknown or "").endswith("files it changes are not known"), module


def test_the_files_a_fix_names_are_known_before_it_runs():
    """Issue 9: an attempt's first save also covers the files its later tasks name, in one
    checkpoint call; a looped task's files and a path with Jinja wait for their own turn."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempt_runner import named_in_the_text

    tasks = yaml.safe_load("""
- name: Gather the package facts
  package_facts: {manager: auto}
- name: Disable kernel.dmesg_restrict in sysctl.d
  block:
    - name: Comment out the key in /etc/sysctl.d
      replace: {path: "{{ item.path }}", regexp: '^kernel', replace: '#kernel'}
      loop: "{{ find_sysctl_d.files }}"
    - name: Set it in /etc/sysctl.conf
      lineinfile: {path: /etc/sysctl.conf, regexp: '^kernel.dmesg_restrict', line: kernel.dmesg_restrict = 1}
  when: '"procps" in ansible_facts.packages'
- name: Write the audit rule
  ansible.builtin.lineinfile: {path: "/etc/audit/rules.d/{{ key }}.rules", line: x, create: true}
- name: Set the key (the module's default sysctl_file; Jinja only in the value)
  ansible.posix.sysctl: {name: kernel.dmesg_restrict, value: "{{ value }}"}
- name: Drop a stale file
  file: {path: /etc/sysctl.d/99-old.conf, state: absent}
- copy: {dest: /etc/issue.net, content: "Authorized uses only\\n"}
- name: Same file again
  lineinfile: {path: /etc/sysctl.conf, line: a}
- name: A directory it creates is saved without its entries
  file: {path: /etc/scapforge-new, state: directory}
- name: junk
  no_such_module_xyz: {path: /etc/passwd}
- not a task
""")
    paths, shallow = named_in_the_text(tasks)
    assert paths == ["/etc/sysctl.conf", "/etc/sysctl.d/99-old.conf", "/etc/issue.net"]
    assert not any("{{" in p for p in paths)
    assert shallow == ["/etc/scapforge-new"]
    assert named_in_the_text("junk") == ([], []) and named_in_the_text(None) == ([], [])
