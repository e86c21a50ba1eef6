"""Which tasks touch the controller's access, and which failures come from the environment.

Access: a task that changes how the controller logs in or escalates runs under the dead-man
switch (issue 7). Which *rules* can cut the controller off is the skill's knowledge
(``skills.Skill.access_impact``, from skill.yml); every applied fix is still followed by a
fresh-connection health check.

Environment: some failures come from where the host runs (a read-only /proc/sys in a
container), not from the rule. Those are escalated with ``environment:<kind>``, never taught
as a lesson about the rule (case sshd-validate-no-privsep-dir). Rules no fix can pass on a
running host (kernel build options, partitioning) are listed by the skill
(``skills.Skill.unfixable_kind``).
"""

from __future__ import annotations

import typing as t

RULE_PREFIX = "xccdf_org.ssgproject.content_rule_"

#: substrings of a failed task's message -> environment kind (the host, not the rule).
ENVIRONMENT_SIGNATURES = (
    ("Missing privilege separation directory", "sshd_privsep_dir_missing"),
    ("/proc/sys", "read_only_proc_sys"),
    ("permission denied on key", "read_only_proc_sys"),  # sysctl -p in a container
    ("Read-only file system", "read_only_filesystem"),
    ("System has not been booted with systemd", "no_systemd"),
    # another process holds the package manager's lock (issue 7 item 7; seen on the lab: the
    # apt module's apt-get waits DPkg::Lock::Timeout=60 s, then says only the second line)
    ("Could not get lock /var/lib/dpkg", "package_manager_locked"),
    ("Unable to acquire the dpkg frontend lock", "package_manager_locked"),
    ("Unable to lock the administration directory (/var/lib/dpkg", "package_manager_locked"),
    ("dpkg frontend lock was locked by another process", "package_manager_locked"),
    ("Could not get lock /var/lib/apt/lists/lock", "package_manager_locked"),
    ("Failed to lock apt for exclusive operation", "package_manager_locked"),
    ("can't create transaction lock on /var/lib/rpm", "package_manager_locked"),
    # ENOSPC: a full filesystem on the target (its /tmp, /var), whatever wrote (oscap's
    # "I/O error : No space left on device", dpkg, a module's write)
    ("No space left on device", "disk_full"),
    ("Temporary failure resolving", "no_package_network"),
    ("Failed to fetch", "no_package_network"),
    ("Unable to connect to", "no_package_network"),
)


#: environment kinds that describe the moment, not the host: another package manager holding
#: its lock, a full file system, a repository outage. They end the rule for this run only;
#: memory never learns them (a lesson would skip the rule after the condition cleared).
TRANSIENT_ENVIRONMENT = frozenset({"package_manager_locked", "disk_full", "no_package_network"})


def is_transient(reason: str | None) -> bool:
    """True for an ``environment:<kind>`` reason whose kind is in :data:`TRANSIENT_ENVIRONMENT`."""
    return (reason or "").startswith("environment:") and reason[len("environment:"):] in TRANSIENT_ENVIRONMENT


def short_rule_id(rule_id: str) -> str:
    """``xccdf_org.ssgproject.content_rule_X`` -> ``X``; other ids are returned unchanged."""
    return rule_id[len(RULE_PREFIX):] if rule_id.startswith(RULE_PREFIX) else rule_id


#: paths whose change can cut the controller off (issue 7 item 1: sshd, PAM, sudoers,
#: nsswitch, login.defs, accounts, network, firewall, crypto policy).
ACCESS_PATHS = (
    "/etc/ssh/", "/etc/pam.d/", "/etc/security/", "/etc/sudoers", "/etc/nsswitch.conf", "/etc/login.defs",
    "/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/network/", "/etc/netplan/",
    "/etc/NetworkManager/", "/etc/sysconfig/network", "/etc/systemd/network/", "/etc/firewalld/",
    "/etc/nftables.conf", "/etc/iptables/", "/etc/ufw/", "/etc/crypto-policies/", "/etc/hosts.allow",
    "/etc/hosts.deny", "/etc/resolv.conf", "/usr/bin/sudo", "/etc/default/useradd",
)
#: paths whose change can break a login shell, become or the programs every later task runs:
#: an attempt that changes one is health-checked on its own, never deferred to its batch's
#: check (issue 9), like one that touches ACCESS_PATHS.
OWN_HEALTH_PATHS = (
    "/etc/profile", "/etc/bash.bashrc", "/etc/environment", "/etc/shells", "/etc/sudo.conf",
    "/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/default/locale", "/etc/locale.conf",
    "/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/libexec/",
)
#: modules whose effects no path names (commands, packages, services): an attempt that runs one
#: to change something is health-checked on its own too.
OWN_HEALTH_MODULES = frozenset({
    "ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.script", "ansible.builtin.raw",
    "ansible.builtin.expect", "ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf",
    "ansible.builtin.dnf5", "ansible.builtin.yum", "ansible.builtin.dpkg_selections", "ansible.builtin.pip",
    "ansible.builtin.service", "ansible.builtin.systemd", "ansible.builtin.systemd_service",
    "ansible.builtin.sysvinit", "ansible.builtin.mount", "ansible.posix.mount", "community.general.zypper",
})
#: modules that change access without a file path the checkpoint would name.
ACCESS_MODULES = frozenset({
    "ansible.builtin.user", "ansible.builtin.group", "ansible.posix.authorized_key", "community.general.pamd",
    "community.general.sudoers", "ansible.posix.firewalld", "community.general.ufw", "ansible.builtin.iptables",
    "community.general.nftables",
})
#: units whose state is access.
ACCESS_UNITS = ("ssh", "sshd", "networking", "NetworkManager", "systemd-networkd", "firewalld", "nftables", "ufw")


def touches_access(fqcn: str, args: dict, paths: t.Sequence[str], home: str | None = None) -> bool:
    """Whether a task can change how the controller logs in or escalates: one of its
    ``paths`` is under ``ACCESS_PATHS`` or the connecting user's ``home``, its module is in
    ``ACCESS_MODULES``, or it acts on an ``ACCESS_UNITS`` service. Such an attempt runs
    under the dead-man switch (issue 7 item 1)."""
    if fqcn in ACCESS_MODULES:
        return True
    prefixes = ACCESS_PATHS + ((home.rstrip("/") + "/",) if home else ())
    if any(p == prefix.rstrip("/") or p.startswith(prefix) for p in paths for prefix in prefixes):
        return True
    if fqcn in ("ansible.builtin.service", "ansible.builtin.systemd", "ansible.builtin.systemd_service",
                "ansible.builtin.sysvinit"):
        name = str(args.get("name") or "").rsplit(".service", 1)[0]
        return name in ACCESS_UNITS
    return False


def needs_own_health(fqcn: str, paths: t.Sequence[str]) -> bool:
    """Whether a task that may change something calls for a health check of its attempt alone:
    its module is in ``OWN_HEALTH_MODULES`` or one of its ``paths`` is under
    ``OWN_HEALTH_PATHS``. Issue 9: such an attempt is not left to its batch's single check,
    which would not tell which attempt broke the host, and a broken shell or become would fail
    the batch's later fixes first."""
    if fqcn in OWN_HEALTH_MODULES:
        return True
    return any(p == prefix.rstrip("/") or p.startswith(prefix) for p in paths for prefix in OWN_HEALTH_PATHS)


def environment_kind(message: str) -> str | None:
    """Classify a failed task's message as an environment fault; None if it looks rule-made."""
    for needle, kind in ENVIRONMENT_SIGNATURES:
        if needle in (message or ""):
            return kind
    return None
