"""Which rules can cut the controller off, and which failures come from the environment.

Access: a fix that changes how the controller logs in or escalates can leave a host that
the next Ansible run cannot manage (cases sudo-nopasswd-lockout, sudo-noexec-breaks-become
in shared/cases). Such rules are skipped with reason ``access_impacting`` unless the user
opts in; every applied fix is still followed by a fresh-connection health check.

Environment: some rules cannot pass on a running host whatever the fix does (kernel build
options, partitioning) or fail because of where the host runs (a read-only /proc/sys in a
container). Those are escalated with ``environment:<kind>``, never taught as a lesson about
the rule (case sshd-validate-no-privsep-dir).
"""

from __future__ import annotations

import re
import typing as t

RULE_PREFIX = "xccdf_org.ssgproject.content_rule_"

#: short rule id -> why its fix can lock the controller out. Sources: shared/cases
#: (sudo-nopasswd-lockout, sudo-noexec-breaks-become) and the SSG rule texts.
ACCESS_IMPACTING: dict[str, str] = {
    "sudo_remove_nopasswd": "removes NOPASSWD: become without a password stops working",
    "sudo_require_authentication": "removes !authenticate/NOPASSWD: become without a password stops working",
    "sudo_remove_no_authenticate": "removes !authenticate: become without a password stops working",
    "sudo_add_noexec": "Defaults noexec stops sudo'd commands from running programs (Ansible's python)",
    "sudo_add_requiretty": "Defaults requiretty breaks become over a non-interactive SSH session",
    "sudo_dedicated_group": "restricts sudo to a group the controller's user may not be in",
    "file_permissions_sudo": "mode 4110 lets only the sudo binary's group run sudo (seen: become exited 126)",
    "sudoers_no_root_target": "removes rules that let the controller's user become root",
    "sudoers_explicit_command_args": "rewrites sudoers rules the controller's user relies on",
    "sudoers_no_command_negation": "rewrites sudoers rules the controller's user relies on",
    "sudo_restrict_privilege_elevation_to_authorized": "restricts who may become root",
    "sshd_limit_user_access": "AllowUsers/AllowGroups can exclude the controller's user",
    "sshd_disable_pubkey_auth": "disables the public-key login the controller uses",
    "sshd_use_approved_ciphers": "sshd crypto policy can exclude the controller's client",
    "sshd_use_approved_macs": "sshd crypto policy can exclude the controller's client",
    "sshd_use_approved_kex_ordered_stig": "sshd crypto policy can exclude the controller's client",
    "sshd_use_strong_ciphers": "sshd crypto policy can exclude the controller's client",
    "sshd_use_strong_macs": "sshd crypto policy can exclude the controller's client",
    "sshd_use_strong_kex": "sshd crypto policy can exclude the controller's client",
    "configure_ssh_crypto_policy": "system crypto policy can exclude the controller's client",
    "service_sshd_disabled": "stops the SSH server the controller uses",
}

#: Rules that cut off a controller that logs in as root (remote user ``root``).
ROOT_LOGIN_RULES = frozenset({"sshd_disable_root_login", "sshd_disable_root_password_login"})

#: Prefixes of short rule ids whose fix can drop the controller's network path.
ACCESS_IMPACTING_PREFIXES = ("set_firewalld_default_zone", "set_nftables_", "set_iptables_default", "firewalld_sshd_")

#: short-id patterns that no fix on a running host can satisfy -> environment kind.
UNFIXABLE_ON_RUNNING_HOST = (
    (re.compile(r"^kernel_config_"), "kernel_config"),
    (re.compile(r"^partition_for_"), "partitioning"),
)

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


def access_impact(rule_id: str, remote_user: str | None) -> str | None:
    """Why applying ``rule_id``'s fix can cut the controller off, or None if it cannot.

    ``remote_user`` is the login user of the connection (``root`` makes the root-login
    rules access-impacting; any other user makes them safe, as the controller does not
    log in as root).
    """
    short = short_rule_id(rule_id)
    if short in ACCESS_IMPACTING:
        return ACCESS_IMPACTING[short]
    if short in ROOT_LOGIN_RULES and (remote_user or "root") == "root":
        return "the controller logs in as root and the fix disables root login"
    if short.startswith(ACCESS_IMPACTING_PREFIXES):
        return "a default-deny firewall can drop the controller's SSH connection"
    return None


#: paths whose change can cut the controller off (issue 7 item 1: sshd, PAM, sudoers,
#: nsswitch, login.defs, accounts, network, firewall, crypto policy).
ACCESS_PATHS = (
    "/etc/ssh/", "/etc/pam.d/", "/etc/security/", "/etc/sudoers", "/etc/nsswitch.conf", "/etc/login.defs",
    "/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/network/", "/etc/netplan/",
    "/etc/NetworkManager/", "/etc/sysconfig/network", "/etc/systemd/network/", "/etc/firewalld/",
    "/etc/nftables.conf", "/etc/iptables/", "/etc/ufw/", "/etc/crypto-policies/", "/etc/hosts.allow",
    "/etc/hosts.deny", "/etc/resolv.conf", "/usr/bin/sudo", "/etc/default/useradd",
)
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


def unfixable_kind(rule_id: str) -> str | None:
    """The environment kind for a rule no fix can pass on a running host, else None."""
    short = short_rule_id(rule_id)
    for pattern, kind in UNFIXABLE_ON_RUNNING_HOST:
        if pattern.search(short):
            return kind
    return None


def environment_kind(message: str) -> str | None:
    """Classify a failed task's message as an environment fault; None if it looks rule-made."""
    for needle, kind in ENVIRONMENT_SIGNATURES:
        if needle in (message or ""):
            return kind
    return None
