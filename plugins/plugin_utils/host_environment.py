"""What the host's environment lets a fix do, for the Worker's context (issue 18 item 5).

A trial with a capable model found "guest container" in the prompt but not which kind, its
init, the capabilities it lacks or what is read-only: so the model spent probes and attempts
on rules no change can fix there (audit rules without the audit netlink, the clock, kernel
parameters under a read-only /proc/sys). One read-only command at the start of the Worker
phase (:data:`COMMAND`, through become) reads PID 1's name, ``systemd-detect-virt``, the
capability bounding set and the read-only mounts; :func:`parse` and :func:`describe` are pure.
"""

from __future__ import annotations

import typing as t

COMMAND = ("printf 'init %s\\n' \"$(cat /proc/1/comm 2>/dev/null)\"; "
           "printf 'virt %s\\n' \"$(systemd-detect-virt 2>/dev/null | head -n 1)\"; "
           "awk '/^CapBnd:/ {print \"capbnd \" $2}' /proc/self/status; "
           "awk '$4 ~ /(^|,)ro(,|$)/ {print \"ro \" $2}' /proc/self/mounts; true")

#: capabilities whose absence decides whole classes of rules: bit -> (name, what it stops).
CAPABILITIES = {
    30: ("CAP_AUDIT_CONTROL", "cannot load audit rules (auditctl, augenrules: no audit netlink)"),
    25: ("CAP_SYS_TIME", "cannot set the clock"),
    16: ("CAP_SYS_MODULE", "cannot load or unload kernel modules"),
    21: ("CAP_SYS_ADMIN", "cannot mount or change mount options"),
    12: ("CAP_NET_ADMIN", "cannot change the firewall or network settings"),
}
#: mount points whose being read-only is worth a line in the prompt.
WATCHED_MOUNTS = ("/", "/etc", "/usr", "/var", "/boot", "/proc/sys", "/sys", "/sys/fs/cgroup")


def parse(stdout: str) -> dict:
    """{init, virtualization, lacks: [capability names], read_only: [mount points]} from
    :data:`COMMAND`'s output; keys it did not print are "" or []."""
    facts: dict[str, t.Any] = {"init": "", "virtualization": "", "lacks": [], "read_only": []}
    for line in str(stdout or "").splitlines():
        key, _sep, value = line.strip().partition(" ")
        value = value.strip()
        if key == "init":
            facts["init"] = value
        elif key == "virt":
            facts["virtualization"] = value
        elif key == "capbnd":
            try:
                bounding = int(value, 16)
            except ValueError:
                continue
            facts["lacks"] = [name for bit, (name, _what) in sorted(CAPABILITIES.items()) if not bounding >> bit & 1]
        elif key == "ro" and value in WATCHED_MOUNTS and value not in facts["read_only"]:
            facts["read_only"].append(value)
    return facts


def describe(facts: dict) -> str:
    """One paragraph for the prompt; "" when nothing was learnt."""
    parts = []
    virt = facts.get("virtualization") or ""
    if virt:
        parts.append("not virtualized" if virt == "none" else "a %s guest" % virt)
    if facts.get("init"):
        parts.append("init is %s" % facts["init"])
    whats = dict(CAPABILITIES.values())
    lacks = [n for n in facts.get("lacks") or [] if n in whats]
    if lacks:  # each capability with what it stops, every one under "lacks" (a relay trial misread a list)
        parts.append("it lacks: %s" % ", ".join("%s (it %s)" % (n, whats[n]) for n in lacks))
    if facts.get("read_only"):
        parts.append("read-only: %s" % ", ".join(facts["read_only"]))
    return "; ".join(parts)


def read(session) -> dict:
    """:func:`parse` of :data:`COMMAND` run on the host; {} when it cannot be run (the
    prompt then says less, nothing fails)."""
    try:
        result = session.run_command(COMMAND)
    except Exception:  # pylint: disable=broad-except  # a fact for a prompt is never worth a failed run
        return {}
    return parse(str(result.get("stdout") or "")) if int(result.get("rc", 1)) == 0 else {}
