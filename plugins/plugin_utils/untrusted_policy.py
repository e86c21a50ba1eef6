# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a model-written (untrusted) task may do on a host (controller only).

One job: the policy the gate (:mod:`.task_gate`) applies to untrusted task lists on top of
the checks every task gets.  It holds:

* :data:`DEFAULT_UNTRUSTED_MODULES`, the module allowlist, and :class:`GatePolicy`, what the
  gate knows about the run (connecting user, the skill's extra modules);
* :func:`task_hazards`, the banned patterns: tasks that would reboot the host, stop sshd,
  take the network down, remove or lock the connecting user, touch its SSH keys or sudo
  rule, remove the packages SSH, sudo and Ansible need, remove broadly, unmount, or write
  under /boot, /proc or /sys.  Shell and command lines are read with :mod:`.shell_split`,
  and each command they run is checked; a line that cannot be split is refused.

Sources: DESIGN.md "Gate" (banned patterns, modules allowlist) and the banned list README.md
gives for model-written tasks; cases sudo-nopasswd-lockout and sudo-noexec-breaks-become in
../shared/cases/cases.yml (sudoers changes that cut the controller's privilege escalation).

Trusted (vendor) task lists get neither the allowlist nor the banned patterns: some SSG
fixes do these things on purpose (service_sshd_disabled stops and masks sshd,
package_openssh-server_removed removes it, sudo_add_noexec writes ``Defaults noexec``);
the loop treats such rules as access-impacting, and the health check after each fix
protects the host.  The banned patterns catch a model's plain mistakes; they are not a
sandbox (a script file the task wrote itself, or an interpreter such as ``python3 -c``, is
not read).  Pure logic; nothing is executed.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
import getopt
import posixpath
import re
import shlex
import typing as t

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import effects
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy.refusals import (
    BANNED_PATTERN, TOUCHES_ACCESS, UNREADABLE_COMMAND, WRITES_OUTSIDE, Hazard,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy.routing import resolve_module
from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import (
    MARK, SHELLS, ShellCommand, ShellParseError, expand_command, find_parts, split_shell,
)

__all__ = ['DEFAULT_UNTRUSTED_MODULES', 'GatePolicy', 'hazards', 'task_hazards']

_within = effects.within
# One maker per code (refusals.CODES): every banned pattern says which kind it is.
_access = functools.partial(Hazard, TOUCHES_ACCESS)
_banned = functools.partial(Hazard, BANNED_PATTERN)
_outside = functools.partial(Hazard, WRITES_OUTSIDE)
_unreadable = functools.partial(Hazard, UNREADABLE_COMMAND)


# Modules a model-written task may use (DESIGN "Gate": modules allowlist): what a STIG / ANSSI
# remediation needs.  Written as Ansible users write them; compared after routing, so
# ansible.builtin.sysctl (routed to ansible.posix.sysctl) is the same entry.
# ansible.builtin.setup: read-only, and one SSG Debian 12 fix gathers facts with it.
# ansible.builtin.yum is absent: ansible-core 2.19 has no such module (dnf replaces it).
# community.general.sudoers is absent: it only writes user/group grant rules (never the
# Defaults lines the STIG/ANSSI sudo rules set), so a model would use it to grant or remove
# privileges; a skill that needs it adds it through GatePolicy.module_allowlist_extra.
DEFAULT_UNTRUSTED_MODULES = frozenset({
    'ansible.builtin.lineinfile', 'ansible.builtin.blockinfile', 'ansible.builtin.replace',
    'ansible.builtin.copy', 'ansible.builtin.file', 'ansible.builtin.stat', 'ansible.builtin.slurp',
    'ansible.builtin.find', 'ansible.builtin.getent', 'ansible.builtin.command', 'ansible.builtin.shell',
    'ansible.builtin.service', 'ansible.builtin.systemd', 'ansible.builtin.systemd_service',
    'ansible.builtin.package', 'ansible.builtin.apt', 'ansible.builtin.dnf',
    'ansible.builtin.package_facts', 'ansible.builtin.service_facts', 'ansible.builtin.setup',
    'ansible.builtin.set_fact', 'ansible.builtin.assert', 'ansible.builtin.debug', 'ansible.builtin.fail',
    'ansible.builtin.user', 'ansible.builtin.group', 'ansible.builtin.cron', 'ansible.builtin.debconf',
    'ansible.posix.sysctl', 'ansible.posix.mount', 'ansible.posix.seboolean',
    'community.general.ini_file', 'community.general.pamd', 'community.general.kernel_blacklist',
    'community.general.modprobe',
})


@functools.lru_cache(maxsize=64)
def _canonical_modules(names: frozenset) -> frozenset:
    """Names resolved to their canonical FQCNs (names that do not resolve are kept as written)."""
    out = set()
    for name in names:
        ref = resolve_module(str(name))
        out.add(ref.fqcn if ref else str(name))
    return frozenset(out)


@dataclasses.dataclass(frozen=True)
class GatePolicy:
    """What the gate needs to know about the run for untrusted (model-written) tasks.

    remote_user: the user Ansible connects as (``ansible_user``); None when unknown, which
      skips the checks that need its name (removing/locking it, its authorized_keys through
      the authorized_key module, its sudo rule by name).  remote_home: its home directory;
      None means ``/root`` for root, else ``/home/<remote_user>``.  module_allowlist_extra:
      module names (FQCN or short, resolved through routing) a skill adds to
      :data:`DEFAULT_UNTRUSTED_MODULES`; a denied module stays denied.
    """

    remote_user: str | None = None
    remote_home: str | None = None
    module_allowlist_extra: frozenset = frozenset()

    def __post_init__(self):
        object.__setattr__(self, 'module_allowlist_extra', frozenset(self.module_allowlist_extra or ()))

    def home(self) -> str | None:
        """The connecting user's home directory (normalised), or None when the user is unknown."""
        if self.remote_home:
            return posixpath.normpath(self.remote_home)
        if not self.remote_user:
            return None
        return '/root' if self.remote_user == 'root' else f'/home/{self.remote_user}'

    def allowed_modules(self) -> frozenset:
        """Canonical FQCNs an untrusted task may use: the defaults plus the skill's extras."""
        return _canonical_modules(DEFAULT_UNTRUSTED_MODULES) | _canonical_modules(self.module_allowlist_extra)


# ============================================================================ banned patterns

_SPECIAL_TREES = ('/boot', '/proc', '/sys')
_SHELL_DIRS = ('/bin', '/usr/bin', '/usr/local/bin')
_SSH_UNIT_RE = re.compile(r'(ssh|sshd|openssh-server)(@[^.]*)?(\.(service|socket))?')
_NETWORK_UNIT_RE = re.compile(r'(networking|NetworkManager|systemd-networkd|network)(\.service)?')
_SHUTDOWN_UNITS = frozenset({
    'reboot.target', 'poweroff.target', 'halt.target', 'kexec.target', 'shutdown.target',
    'soft-reboot.target', 'rescue.target', 'emergency.target', 'ctrl-alt-del.target', 'sleep.target',
    'suspend.target', 'hibernate.target', 'hybrid-sleep.target', 'suspend-then-hibernate.target',
    'systemd-reboot.service', 'systemd-poweroff.service', 'systemd-halt.service', 'systemd-kexec.service',
    'systemd-soft-reboot.service',
})
_SHUTDOWN_VERBS = frozenset({
    'reboot', 'poweroff', 'halt', 'kexec', 'soft-reboot', 'suspend', 'hibernate', 'hybrid-sleep',
    'suspend-then-hibernate', 'rescue', 'emergency', 'exit', 'switch-root',
})
_SHUTDOWN_COMMANDS = frozenset({'reboot', 'shutdown', 'poweroff', 'halt', 'kexec'})
_SHUTDOWN_MODULES = frozenset({'ansible.builtin.reboot', 'community.general.shutdown'})
# Packages whose removal cuts the controller off: SSH, sudo (become), Python (every module).
_ACCESS_PACKAGES = frozenset({'openssh-server', 'openssh', 'sudo', 'python3'})
_SUDO_GROUPS = frozenset({'sudo', 'wheel', 'admin'})
_NOLOGIN_SHELLS = frozenset({'/sbin/nologin', '/usr/sbin/nologin', '/bin/false', '/usr/bin/false'})
# Removing one of these, or a directory above one, breaks login, sudo or the system itself.
_PROTECTED_FROM_REMOVAL = (
    '/etc/ssh/sshd_config', '/etc/pam.d', '/etc/sudoers', '/etc/sudoers.d', '/etc/passwd', '/etc/shadow',
    '/etc/group', '/etc/gshadow', '/etc/nsswitch.conf', '/etc/security', '/etc/systemd', '/etc/fstab',
    '/usr/bin', '/usr/sbin', '/usr/lib', '/usr/libexec', '/var/lib/dpkg', '/var/lib/rpm',
)
_AUTH_KEYS_RE = re.compile(r'(^|/)\.ssh/authorized_keys[^/]*$')
_TILDE_SSH_RE = re.compile(r'^~[^/]*/\.ssh(/|$)')
_GLOB_CHARS = '*?['
# Endings of reasons several checks give.
_NO_SSH_LOGIN = 'no new SSH login (the health check, the next run) would get in'
_NETWORK_DOWN = 'would take the network, and the SSH connection, down'
_SSH_ACCESS = 'the SSH access (authorized_keys) the controller logs in with'
_SUDOERS_ONLY_VALIDATED = ('sudoers may only be changed with lineinfile, blockinfile or replace and validate:'
                           ' visudo -cf %s')
_SUDOERS_EDITORS = frozenset({'ansible.builtin.lineinfile', 'ansible.builtin.blockinfile',
                              'ansible.builtin.replace', 'ansible.builtin.copy'})
_SERVICE_MODULES = frozenset({'ansible.builtin.service', 'ansible.builtin.systemd',
                              'ansible.builtin.systemd_service', 'ansible.builtin.sysvinit'})
_PACKAGE_MODULES = frozenset({'ansible.builtin.package', 'ansible.builtin.apt', 'ansible.builtin.dnf',
                              'ansible.builtin.dnf5'})
# ``use`` makes package/service run another module with the same arguments: only these.
_PACKAGE_BACKENDS = frozenset({'ansible.builtin.apt', 'ansible.builtin.dnf', 'ansible.builtin.dnf5'})
_SERVICE_BACKENDS = frozenset({'ansible.builtin.systemd', 'ansible.builtin.systemd_service',
                               'ansible.builtin.sysvinit', 'ansible.builtin.service'})


def task_hazards(fqcn: str, args: dict, policy: GatePolicy | None = None) -> list[str]:
    """What an untrusted task would do that the gate bans; [] when nothing.

    fqcn: the module's canonical FQCN (after routing); args: its arguments as
    ModuleArgsParser returns them (free-form text in ``_raw_params``).  Each reason says
    what the task would do, e.g. "`systemctl stop ssh` stops ssh: ...".  Banned: rebooting
    or powering off; stopping, restarting, disabling or masking sshd (reload is the safe way:
    ssh.service checks the file with ``sshd -t`` first); taking the network down; removing
    or locking the connecting user or its sudo group; touching its authorized_keys;
    changing its sudo rule (sudoers may only get validated Defaults lines); removing the
    packages SSH, sudo and Ansible need; ``rm -r`` except on explicit absolute paths at least
    two levels deep; removing paths fewer than two levels deep or paths login depends on;
    writing under /boot, /proc or /sys (``sysctl -w``, ``sysctl_set``); unmounting; shell and
    command lines that cannot be split.  Pure; never raises for odd argument values.
    """
    return [h.text for h in hazards(fqcn, args, policy)]


def hazards(fqcn: str, args: dict, policy: GatePolicy | None = None) -> list[Hazard]:
    """:func:`task_hazards`, each reason with its code (``writes_outside``, ``touches_access``,
    ``banned_pattern``, ``unreadable_command``: :mod:`._policy.refusals`)."""
    policy = policy or GatePolicy()
    args = args if isinstance(args, dict) else {}
    out: list[Hazard] = []
    if fqcn in _SHUTDOWN_MODULES:
        out.append(_banned(f'{fqcn} would reboot or power off the host'))
    if fqcn in ('ansible.builtin.command', 'ansible.builtin.shell'):
        out += _command_module_reasons(fqcn, args, policy)
    if fqcn in _SERVICE_MODULES:
        out += _service_module_reasons(args)
    if fqcn in _PACKAGE_MODULES:
        out += _package_module_reasons(args)
    if fqcn == 'ansible.builtin.user':
        out += _user_module_reasons(args, policy)
    if fqcn == 'ansible.builtin.group':
        name = args.get('name')
        if str(args.get('state')) == 'absent' and isinstance(name, str) \
                and (name in _SUDO_GROUPS or name == policy.remote_user):
            out.append(_access(f'removes the group {name}, through which sudo or the connecting user depends on it'))
    if fqcn == 'ansible.posix.authorized_key':
        user = args.get('user')
        if policy.remote_user is None or user == policy.remote_user:
            out.append(_access(
                f'changes the authorized_keys of {user or "a user"}: the SSH access the controller logs in with'))
    if fqcn == 'community.general.sudoers':
        out += _sudoers_module_reasons(args, policy)
    if fqcn == 'ansible.posix.sysctl' and _as_bool(args.get('sysctl_set')):
        out.append(_outside('sysctl_set: true writes the value under /proc/sys at once with sysctl -w; persist it with'
                   ' sysctl_set: false and let reload apply the file (as the host does at every boot)'))
    if fqcn == 'ansible.posix.mount' and str(args.get('state')) in ('unmounted', 'absent'):
        out.append(_banned(
            f'unmounts {args.get("path") or args.get("name")}: remediation changes mount options, it does'
            ' not unmount (a home directory or /usr could vanish under running services)'))
    if fqcn == 'ansible.builtin.cron' and str(args.get('state', 'present')) != 'absent' \
            and isinstance(args.get('job'), str):
        out += [r.prefixed('cron job: ') for r in _shell_text_reasons(args['job'], policy)]
    if isinstance(args.get('validate'), str):
        out += [r.prefixed('validate: ')
                for r in _argv_text_reasons(args['validate'].replace('%s', '/tmp/validate'), policy)]
    out += _write_path_reasons(fqcn, args, policy)
    return _unique(out)


def _unique(found: list[Hazard]) -> list[Hazard]:
    """The hazards in order, each reason text once."""
    seen: set = set()
    return [h for h in found if not (h.text in seen or seen.add(h.text))]


# ---------------------------------------------------------------------------- helpers

def _as_bool(value: t.Any) -> bool | None:
    """Ansible's boolean reading of value; None when absent or not a boolean."""
    if value is None:
        return None
    try:
        return boolean(value, strict=True)
    except TypeError:
        return None


def _as_list(value: t.Any) -> list[str]:
    """A module's list argument as strings (comma-separated strings split, as Ansible does)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(',') if v.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def _norm(path: t.Any) -> str | None:
    """An absolute path normalised lexically; None for anything else."""
    if not isinstance(path, str) or not path.startswith('/'):
        return None
    norm = posixpath.normpath(path)
    return '/' + norm.lstrip('/')


def _depth(path: str) -> int:
    return len([p for p in path.split('/') if p not in ('', '.')])


def _is_sudoers_path(path: t.Any) -> bool:
    norm = _norm(path)
    return bool(norm) and norm.startswith('/etc/sudoers')


def _is_ssh_access_path(path: t.Any, policy: GatePolicy) -> bool:
    """authorized_keys anywhere, any ``~…/.ssh``, and the connecting user's ``~/.ssh``."""
    if not isinstance(path, str):
        return False
    if _AUTH_KEYS_RE.search(path) or _TILDE_SSH_RE.match(path):
        return True
    home, norm = policy.home(), _norm(path)
    return bool(home and norm and _within(norm, posixpath.join(home, '.ssh')))


def _special_tree(path: t.Any) -> str | None:
    norm = _norm(path)
    if norm:
        for root in _SPECIAL_TREES:
            if _within(norm, root):
                return root
    return None


def _mentions_user(text: str, user: str | None) -> bool:
    return bool(user) and re.search(rf'(?<![\w.-]){re.escape(user)}(?![\w-])', text) is not None


def _is_ssh_unit(name: t.Any) -> bool:
    return _unit_matches(name, _SSH_UNIT_RE, ('ssh', 'sshd', 'ssh.service', 'sshd.service', 'ssh.socket'))


def _is_network_unit(name: t.Any) -> bool:
    return _unit_matches(name, _NETWORK_UNIT_RE, ('networking.service', 'NetworkManager.service',
                                                  'systemd-networkd.service'))


def _unit_matches(name: t.Any, pattern: re.Pattern, examples: tuple) -> bool:
    if not isinstance(name, str):
        return False
    if any(c in name for c in _GLOB_CHARS):
        return any(fnmatch.fnmatchcase(ex, name) for ex in examples)
    return pattern.fullmatch(name) is not None


def _is_shutdown_unit(name: t.Any) -> bool:
    return isinstance(name, str) and (name in _SHUTDOWN_UNITS or f'{name}.target' in _SHUTDOWN_UNITS)


def _removal_reasons(path: str, policy: GatePolicy) -> list[Hazard]:
    """Why removing ``path`` (absolute, normalised; may hold a glob) is banned; [] when it is not."""
    parts = [p for p in path.split('/') if p not in ('', '.')]
    if any(c in path for c in _GLOB_CHARS):
        fixed = []
        for part in parts:
            if any(c in part for c in _GLOB_CHARS):
                break
            fixed.append(part)
        base = '/' + '/'.join(fixed)
    else:
        base = path
    if _depth(base) < 2:  # a glob in /etc/* removes from /etc itself
        return [_banned(f'removes {path}, fewer than two levels below /')]
    protected = list(_PROTECTED_FROM_REMOVAL)
    if policy.home():
        protected.append(policy.home())
    for prot in protected:
        if prot == base or prot.startswith(base.rstrip('/') + '/'):
            return [_banned(f'removes {path}, which takes {prot} with it')]
    if _within(base, '/etc/pam.d'):
        return [_banned(f'removes {path}: PAM reads it at every login and sudo')]
    return []


def _explicit_path_problem(op: str) -> str | None:
    """Why ``op`` is not an explicit absolute path at least two levels deep; None when it is."""
    if any(c in op for c in ('$', '`', MARK)):
        return 'it uses a variable or a command substitution'
    if any(c in op for c in _GLOB_CHARS + '{}'):
        return 'it uses a glob or braces'
    if op.startswith('~'):
        return 'it uses ~'
    if not op.startswith('/'):
        return 'it is not an absolute path'
    parts = [p for p in op.split('/') if p not in ('', '.')]
    if '..' in parts:
        return 'it uses ..'
    if len(parts) < 2:
        return 'it is fewer than two levels below /'
    return None


# ---------------------------------------------------------------------------- module checks

def _service_module_reasons(args: dict) -> list[Hazard]:
    out = []
    name = args.get('name', args.get('service', args.get('unit')))
    state = str(args.get('state') or '')
    enabled, masked = _as_bool(args.get('enabled')), _as_bool(args.get('masked'))
    if _is_ssh_unit(name):
        if state == 'stopped':
            out.append(_access(f'stops {name}: {_NO_SSH_LOGIN}'))
        if state == 'restarted':
            out.append(_access(
                f'restarts {name}: with a broken configuration sshd then stays stopped; use state: reloaded'
                ' (ssh.service checks the file with sshd -t before it reloads)'))
        if enabled is False:
            out.append(_access(f'disables {name}: after the next boot nobody can log in over SSH'))
        if masked is True:
            out.append(_access(f'masks {name}: sshd could not be started again'))
    if _is_network_unit(name) and (state == 'stopped' or enabled is False or masked is True):
        out.append(_access(f'stops or disables {name}: it {_NETWORK_DOWN}'))
    if _is_shutdown_unit(name) and state in ('started', 'restarted', 'reloaded'):
        out.append(_banned(f'starts {name}: it would reboot, power off or isolate the host'))
    return out + _use_reasons(args.get('use'), _SERVICE_BACKENDS, 'systemd or sysvinit')


def _package_module_reasons(args: dict) -> list[Hazard]:
    out = []
    names = _as_list(args.get('name', args.get('pkg', args.get('package'))))
    state = str(args.get('state') or '')
    if state in ('absent', 'removed'):
        hit = sorted({n for n in names if _package_base(n) in _ACCESS_PACKAGES})
        if hit:
            out.append(_access(f'removes {", ".join(hit)}: the host would lose SSH, sudo or the Python every Ansible'
                       ' module needs'))
    for n in names:
        if '://' in n or n.startswith(('/', '~', '.')) or n.endswith(('.deb', '.rpm')):
            out.append(_banned(f'installs {n} from outside the configured package repositories'))
    if args.get('deb'):
        out.append(_banned(f'deb: installs {args["deb"]} from outside the configured package repositories'))
    for key in ('allow_unauthenticated', 'disable_gpg_check'):
        if _as_bool(args.get(key)):
            out.append(_banned(f'{key}: installs packages whose signatures are not checked'))
    return out + _use_reasons(args.get('use'), _PACKAGE_BACKENDS, 'apt or dnf')


def _use_reasons(use: t.Any, backends: frozenset, shown: str) -> list[Hazard]:
    """Why ``use`` (package and service run that module with the same arguments) is refused; [] for
    ``auto`` or a module that resolves to one of backends (canonical FQCNs); shown names them."""
    if use is None or str(use).lower() == 'auto':
        return []
    ref = resolve_module(str(use))
    if ref is None or ref.fqcn not in backends:
        return [_banned(f'use: {use} would run another module with these arguments; only auto, {shown}')]
    return []


def _package_base(name: str) -> str:
    return re.split(r'[=<>:\s]', name.strip(), maxsplit=1)[0]


def _user_module_reasons(args: dict, policy: GatePolicy) -> list[Hazard]:
    user = policy.remote_user
    name = args.get('name', args.get('user'))
    if not user or name != user:
        return []
    out = []
    who = f'the connecting user {user}'
    if str(args.get('state')) == 'absent':
        out.append(_access(f'removes {who}'))
    if _as_bool(args.get('password_lock')):
        out.append(_access(f'locks the password of {who}'))
    expires = args.get('expires')
    if expires is not None:
        try:
            never = float(expires) == -1
        except (TypeError, ValueError):
            never = False
        if not never:
            out.append(_access(f'sets an account expiry date on {who}'))
    shell = args.get('shell')
    if isinstance(shell, str) and shell in _NOLOGIN_SHELLS:
        out.append(_access(f'gives {who} the shell {shell}: its logins, Ansible\'s among them, would be refused'))
    password = args.get('password')
    if isinstance(password, str) and password.startswith(('!', '*')):
        out.append(_access(f'locks the password of {who} (a password field starting with {password[0]})'))
    if args.get('groups') is not None and not _as_bool(args.get('append')):
        out.append(_access(f'replaces the groups of {who} (its sudo/wheel membership may go); use append: true'))
    return out


def _sudoers_module_reasons(args: dict, policy: GatePolicy) -> list[Hazard]:
    out = []
    user = args.get('user')
    if policy.remote_user is None or user == policy.remote_user:
        out.append(_access(f'changes the sudo rule of {user or "a user"} (the connecting user\'s privilege escalation'
                   ' may depend on it)'))
    if str(args.get('state')) == 'absent':
        out.append(_access(
            f'removes the sudoers rule {args.get("name")}: it may be the one the connecting user escalates with'))
    if _as_bool(args.get('noexec')):
        out.append(_access(
            'sets NOEXEC: commands run through sudo, Ansible\'s modules among them, could not start others'))
    return out


def _write_path_reasons(fqcn: str, args: dict, policy: GatePolicy) -> list[Hazard]:
    out = []
    state = args.get('state')
    for path in effects.module_write_paths(fqcn, args):
        root = _special_tree(path)
        metadata_only = fqcn == 'ansible.builtin.file' and state in (None, 'file')
        if root and not (root == '/boot' and metadata_only):
            out.append(_outside(f'writes {path}, under {root}'))
        if _is_ssh_access_path(path, policy):
            out.append(_access(f'changes {path}: {_SSH_ACCESS}'))
        if _is_sudoers_path(path):
            out += _sudoers_edit_reasons(fqcn, args, _norm(path), policy)
        if fqcn == 'ansible.builtin.file' and state == 'absent' and not _is_sudoers_path(path):
            norm = _norm(path)
            out += _removal_reasons(norm, policy) if norm else [_banned(f'removes the relative path {path}')]
    return out


_DEFAULTS_LINE_RE = re.compile(r'Defaults([:@!>]\S+)?(\s|$)')
_BACKREF_RE = re.compile(r'^(\\\d|\\g<\w+>)')
_SUDO_BREAKING_RE = re.compile(r'(?<![!\w])(requiretty|noexec)\b', re.I)


def _sudoers_edit_reasons(fqcn: str, args: dict, path: str, policy: GatePolicy) -> list[Hazard]:
    """Model-written tasks may add or change sudo ``Defaults`` lines, validated by visudo, and nothing else.

    Source: cases sudo-nopasswd-lockout and sudo-noexec-breaks-become (../shared/cases/cases.yml):
    a sudoers change can remove the controller's own privilege escalation.
    """
    user = policy.remote_user
    out = []
    if fqcn == 'ansible.builtin.file':
        state = args.get('state')
        if state == 'absent':
            out.append(_access(f'removes {path}: it may hold the connecting user\'s sudo rule'))
        if state in ('link', 'hard'):
            out.append(_access(f'replaces {path} with a link'))
        if _mode_writable_by_others(args.get('mode')):
            out.append(_access(f'makes {path} writable by group or others: sudo then refuses to run at all'))
        owner = args.get('owner')
        if owner is not None and str(owner) not in ('root', '0'):
            out.append(_access(f'gives {path} to {owner}: sudo then refuses to run at all'))
        return out
    if fqcn not in _SUDOERS_EDITORS:
        return [_access(
            f'{fqcn} changes {path}: sudoers may only be changed with lineinfile, blockinfile, replace or copy')]
    validate = args.get('validate')
    if not (isinstance(validate, str) and 'visudo' in validate and '%s' in validate):
        out.append(_access(
            f'changes {path} without validate: visudo -cf %s (a syntax error there stops sudo for everyone,'
            ' the controller included)'))
    if fqcn == 'ansible.builtin.copy':
        if path == '/etc/sudoers':
            out.append(_access(
                'replaces the whole of /etc/sudoers, with the rules and includes the connecting user\'s sudo'
                ' comes from; change Defaults lines with lineinfile'))
        elif _as_bool(args.get('force')) is not False:
            out.append(_access(
                f'may overwrite {path}, which can hold the connecting user\'s sudo rule; use force: false'
                ' (create only) or lineinfile'))
    if _mentions_user(path.rsplit('/', 1)[-1], user):
        out.append(_access(f'changes {path}, the file named after the connecting user {user}'))
    matchers = {k: args.get(k) for k in ('regexp', 'regex', 'search_string') if isinstance(args.get(k), str)}
    absent = str(args.get('state')) == 'absent'
    if fqcn == 'ansible.builtin.lineinfile' and absent and isinstance(args.get('line', args.get('value')), str):
        matchers['line'] = args.get('line', args.get('value'))
    for key, text in matchers.items():
        if _mentions_user(text, user) or 'nopasswd' in text.lower() or re.search(r'%(sudo|wheel|admin)\b', text):
            out.append(_access(
                f'{key} {text!r} in {path} matches the connecting user\'s sudo rule (its name, NOPASSWD or'
                ' its sudo group)'))
        elif 'Defaults' not in text:
            out.append(_access(f'{key} {text!r} in {path} may match user rules; model-written tasks may only match'
                       ' Defaults lines'))
    written = []
    if not absent:
        for key in ('line', 'value', 'content', 'block', 'replace'):
            if isinstance(args.get(key), str):
                written.append(args[key])
    for text in written:
        for line in text.splitlines():
            line = line.strip()
            if not line or (line.startswith('#') and not line.startswith('#include')) or _BACKREF_RE.match(line):
                continue
            if not _DEFAULTS_LINE_RE.match(line):
                out.append(_access(
                    f'writes {line!r} to {path}: model-written tasks may only add or change sudo Defaults lines'))
            elif _mentions_user(line, user) or 'nopasswd' in line.lower():
                out.append(_access(f'writes {line!r} to {path}: it changes the connecting user\'s own sudo settings'))
            elif _SUDO_BREAKING_RE.search(line):
                out.append(_access(
                    f'writes {line!r} to {path}: requiretty and noexec break privilege escalation through'
                    ' sudo (case sudo-noexec-breaks-become)'))
    return out


def _mode_writable_by_others(mode: t.Any) -> bool:
    if mode is None or isinstance(mode, bool):
        return False
    if isinstance(mode, int):
        return bool(mode & 0o022)
    text = str(mode).strip()
    if re.fullmatch(r'[0-7]{3,4}', text):
        return bool(int(text, 8) & 0o022)
    for clause in text.split(','):
        m = re.fullmatch(r'([ugoa]*)([-+=])([rwxXst]*)', clause.strip())
        if m and m.group(2) in '+=' and 'w' in m.group(3) and (not m.group(1) or set(m.group(1)) & set('goa')):
            return True
    return False


# ---------------------------------------------------------------------------- command lines

def _shell_text_reasons(text: str, policy: GatePolicy, stdin: str | None = None) -> list[Hazard]:
    """Banned-pattern reasons for a shell line (shell module, cron job)."""
    try:
        cmds = [c for top in split_shell(text) for c in expand_command(top, stdin)]
    except ShellParseError as ex:
        return [_unreadable(f'cannot check this shell command ({ex}): {_short(text)}')]
    return _commands_reasons(cmds, policy)


def _argv_text_reasons(text: str, policy: GatePolicy, stdin: str | None = None) -> list[Hazard]:
    """Banned-pattern reasons for a command line run without a shell (command module, validate)."""
    try:
        cmds = expand_command(ShellCommand(shlex.split(text)), stdin)
    except ValueError as ex:  # shlex's own, or ShellParseError
        return [_unreadable(f'cannot check this command ({ex}): {_short(text)}')]
    return _commands_reasons(cmds, policy)


def _command_module_reasons(fqcn: str, args: dict, policy: GatePolicy) -> list[Hazard]:
    raw = args.get('_raw_params')
    if raw in (None, ''):
        raw = args.get('cmd')
    stdin = args.get('stdin') if isinstance(args.get('stdin'), str) else None
    if fqcn == 'ansible.builtin.shell':
        exe = args.get('executable')
        if exe is not None and not (isinstance(exe, str) and posixpath.dirname(exe) in _SHELL_DIRS
                                    and posixpath.basename(exe) in SHELLS):
            return [_unreadable(f'executable {exe!r} is not a known shell (use /bin/sh or /bin/bash)')]
        if not isinstance(raw, str):
            return [_unreadable('cannot check this shell command: no command line given')]
        return _shell_text_reasons(raw, policy, stdin)
    argv = args.get('argv')
    if argv is not None:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, (str, int, float)) for a in argv):
            return [_unreadable('argv must be a non-empty list of strings')]
        try:
            cmds = expand_command(ShellCommand([str(a) for a in argv]), stdin)
        except ShellParseError as ex:
            return [_unreadable(f'cannot check this command ({ex})')]
        return _commands_reasons(cmds, policy)
    if not isinstance(raw, str):
        return [_unreadable('cannot check this command: no command line given')]
    return _argv_text_reasons(raw, policy, stdin)


def _short(text: t.Any, limit: int = 100) -> str:
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _commands_reasons(cmds: list, policy: GatePolicy) -> list[Hazard]:
    out: list[Hazard] = []
    for cmd in cmds:
        out += _command_reasons(cmd, policy)
    return _unique(out)


def _command_reasons(cmd: ShellCommand, policy: GatePolicy) -> list[Hazard]:
    out: list[Hazard] = []
    shown = _short(shlex.join(cmd.argv) if cmd.argv else '', 80)
    for target in cmd.writes:
        root = _special_tree(target)
        if root:
            out.append(_outside(f'`{shown}` writes {target}, under {root}'))
        if _is_sudoers_path(target):
            out.append(_access(f'`{shown}` writes {target} through a redirection: {_SUDOERS_ONLY_VALIDATED}'))
        if _is_ssh_access_path(target, policy):
            out.append(_access(f'`{shown}` writes {target}: {_SSH_ACCESS}'))
    argv = cmd.argv
    if not argv:
        return out
    if any(m in argv[0] for m in ('$', '`', MARK)):
        return out + [_unreadable(
            f'cannot check this shell command: the command name in `{shown}` comes from a variable'
            ' or a substitution')]
    name, args = posixpath.basename(argv[0]), argv[1:]
    if argv[0].startswith(('/etc/init.d/', '/etc/rc.d/init.d/')):
        out += _init_script_reasons(name, args[0] if args else '', shown)
    check = _COMMAND_CHECKS.get(name)
    if check is not None:
        out += check(name, args, policy, shown)
    effect = effects.command_effect(argv)
    for path in effect.writes:
        root = _special_tree(path)
        if root and not (root == '/boot' and effect.metadata_only):
            out.append(_outside(f'`{shown}` writes {path}, under {root}'))
    # arguments naming sudoers or authorized_keys are fine for a command that only reads, and for a
    # wrapper (sudo, find -exec...): the command it runs is checked on its own
    if effect.kind == effects.WRITES or effect.writes:
        for arg in args:
            for path in (arg, arg.split('=', 1)[1] if '=' in arg else None):
                if path is None:
                    continue
                if _is_sudoers_path(path):
                    out.append(_access(f'`{shown}` changes {path} from a command: {_SUDOERS_ONLY_VALIDATED}'))
                elif _is_ssh_access_path(path, policy):
                    out.append(_access(f'`{shown}` touches {path}: {_SSH_ACCESS}'))
    return out


def _reboot_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    return [_banned(f'`{shown}` would reboot or power off the host')]


def _init_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    if name == 'telinit' or (args and args[0] in ('0', '6', '1', 's', 'S', 'single', 'emergency')):
        return [_banned(f'`{shown}` changes the runlevel: it would reboot, halt or drop the host to single-user mode')]
    return []


_SYSTEMCTL_SHORT_VALUES = 'tspPHMon'
_SYSTEMCTL_LONG_VALUES = frozenset({
    '--type', '--state', '--property', '--signal', '--kill-whom', '--kill-value', '--host', '--machine',
    '--root', '--image', '--output', '--lines', '--job-mode', '--what', '--timestamp', '--boot-loader-entry',
    '--boot-loader-menu', '--reboot-argument', '--message', '--when', '--preset-mode', '--check-inhibitors',
    '--drop-in',
})


def _systemctl_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    ops = effects.operands(args, _SYSTEMCTL_SHORT_VALUES, tuple(_SYSTEMCTL_LONG_VALUES))
    if not ops:
        return []
    verb, units = ops[0], ops[1:]
    now = '--now' in args
    out = []
    if verb in _SHUTDOWN_VERBS:
        out.append(_banned(f'`{shown}` would reboot, power off or suspend the host'))
    if verb == 'isolate':
        out.append(_banned(f'`{shown}` isolates a target: every service it lacks stops, sshd among them'))
    starting = verb in ('start', 'restart', 'try-restart', 'reload-or-restart', 'try-reload-or-restart') \
        or (verb == 'enable' and now)
    if starting and any(_is_shutdown_unit(u) for u in units):
        out.append(_banned(f'`{shown}` would reboot or power off the host'))
    for unit in units:
        if _is_ssh_unit(unit):
            if verb in ('stop', 'kill', 'freeze') or (verb in ('disable', 'mask') and now):
                out.append(_access(f'`{shown}` stops {unit}: {_NO_SSH_LOGIN}'))
            elif verb in ('disable', 'mask'):
                out.append(_access(f'`{shown}` {verb}s {unit}: sshd would not start again after a reboot'))
            elif verb in ('restart', 'try-restart', 'condrestart'):
                out.append(_access(f'`{shown}` restarts {unit}: with a broken configuration sshd then stays stopped;'
                           ' use `systemctl reload ssh` (ssh.service checks the file with sshd -t first)'))
        if _is_network_unit(unit) and verb in ('stop', 'kill', 'disable', 'mask'):
            out.append(_access(f'`{shown}` {_NETWORK_DOWN}'))
    return out


def _service_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    ops = [a for a in args if not a.startswith('-')]
    if name == 'update-rc.d':
        if ops and _is_ssh_unit(ops[0]) and any(a in ('remove', 'disable', 'stop') for a in ops[1:]):
            return [_access(f'`{shown}` disables sshd at boot')]
        return []
    if name == 'chkconfig':
        if any(_is_ssh_unit(a) for a in ops) and ('off' in ops or '--del' in args):
            return [_access(f'`{shown}` disables sshd at boot')]
        return []
    if not ops:
        return []
    action = ops[1] if len(ops) > 1 else ('restart' if '--full-restart' in args else '')
    return _init_script_reasons(ops[0], action, shown)


def _init_script_reasons(unit: str, action: str, shown: str) -> list[Hazard]:
    """Reasons for ``/etc/init.d/UNIT ACTION`` or ``service UNIT ACTION`` (shown: the command as written)."""
    if _is_ssh_unit(unit) and action in ('stop', 'force-stop'):
        return [_access(f'`{shown}` stops sshd: {_NO_SSH_LOGIN}')]
    if _is_ssh_unit(unit) and action in ('restart', 'try-restart', 'condrestart'):
        return [_access(f'`{shown}` restarts sshd: with a broken configuration sshd then stays stopped; use reload')]
    if _is_network_unit(unit) and action in ('stop', 'force-stop'):
        return [_access(f'`{shown}` {_NETWORK_DOWN}')]
    return []


def _kill_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    out = []
    if any('ssh' in a.lower() for a in args):
        out.append(_access(f'`{shown}` signals sshd: SSH logins would stop; use `systemctl reload ssh`'))
    user = policy.remote_user
    if user and name != 'kill' and any(a == user or a.endswith(('=' + user, '-u' + user, '-U' + user))
                                       or a.split(',').count(user) for a in args):
        out.append(_access(
            f'`{shown}` kills the processes of the connecting user {user}, the Ansible session among them'))
    if name == 'kill':
        rest = args[2:] if args[:1] in (['-s'], ['-n']) else args[1:] if args[:1] and args[0].startswith('-') else args
        if '-1' in rest or (rest[:1] == ['--'] and '-1' in rest[1:]):
            out.append(_banned(f'`{shown}` signals every process of the host'))
    if name == 'loginctl' and args:
        if args[0] in ('terminate-session', 'kill-session', 'terminate-seat'):
            out.append(_access(f'`{shown}` ends login sessions, perhaps the Ansible one'))
        if args[0] in ('terminate-user', 'kill-user') and user and user in args[1:]:
            out.append(_access(f'`{shown}` ends every session of the connecting user {user}'))
    return out


def _user_command_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    user = policy.remote_user
    if not user or not any(user in a for a in args):
        return []
    who = f'the connecting user {user}'
    if name in ('userdel', 'deluser'):
        ops = effects.operands(args, 'RP', ('--root', '--prefix', '--conf', '--backup-to'))
        return [_access(f'`{shown}` removes {who} (or its group membership)')] if ops[:1] == [user] else []
    if name == 'gpasswd':
        for k, a in enumerate(args):
            if a in ('-d', '--delete') and k + 1 < len(args) and args[k + 1] == user:
                return [_access(f'`{shown}` removes {who} from a group (its sudo group perhaps)')]
        return []
    specs = {
        'usermod': ('abc:d:e:f:g:G:hl:Lmop:R:P:s:u:UZ:v:V:w:W:',
                    ['append', 'badname', 'comment=', 'home=', 'expiredate=', 'inactive=', 'gid=', 'groups=', 'help',
                     'login=', 'lock', 'move-home', 'non-unique', 'password=', 'prefix=', 'root=', 'shell=', 'uid=',
                     'unlock', 'add-subuids=', 'del-subuids=', 'add-subgids=', 'del-subgids=', 'selinux-user=']),
        'passwd': ('adehi:kln:qr:R:P:Suw:x:',
                   ['all', 'delete', 'expire', 'help', 'keep-tokens', 'inactive=', 'lock', 'mindays=', 'quiet',
                    'repository=', 'root=', 'prefix=', 'status', 'unlock', 'warndays=', 'maxdays=', 'stdin']),
        'chage': ('d:E:hiI:lm:M:R:P:W:',
                  ['lastday=', 'expiredate=', 'help', 'iso8601', 'inactive=', 'list', 'mindays=', 'maxdays=', 'root=',
                   'prefix=', 'warndays=']),
    }
    shortopts, longopts = specs[name]
    try:
        opts, ops = getopt.gnu_getopt(args, shortopts, longopts)
    except getopt.GetoptError as ex:
        return [_unreadable(f'cannot check `{shown}` ({ex}) and it names the connecting user {user}')]
    if ops[-1:] != [user]:
        return []
    given = {}
    for opt, val in opts:
        given[opt] = val
    out = []
    if name == 'usermod':
        if '-L' in given or '--lock' in given:
            out.append(_access(f'`{shown}` locks {who}'))
        expiry = given.get('-e', given.get('--expiredate'))
        if expiry is not None and expiry not in ('', '-1'):
            out.append(_access(f'`{shown}` sets an account expiry date on {who}'))
        shell = given.get('-s', given.get('--shell'))
        if shell in _NOLOGIN_SHELLS:
            out.append(_access(f'`{shown}` gives {who} the shell {shell}: its logins would be refused'))
        password = given.get('-p', given.get('--password'))
        if password is not None and password.startswith(('!', '*')):
            out.append(_access(f'`{shown}` locks the password of {who}'))
        if '-l' in given or '--login' in given:
            out.append(_access(f'`{shown}` renames {who}: the controller logs in by that name'))
        if ('-G' in given or '--groups' in given) and not ('-a' in given or '--append' in given):
            out.append(_access(f'`{shown}` replaces the groups of {who} (its sudo/wheel membership may go); use -aG'))
    if name == 'passwd':
        if '-l' in given or '--lock' in given:
            out.append(_access(f'`{shown}` locks the password of {who}'))
        if '-e' in given or '--expire' in given:
            out.append(_access(f'`{shown}` expires the password of {who}: its non-interactive logins would fail'))
    if name == 'chage':
        expiry = given.get('-E', given.get('--expiredate'))
        if expiry is not None and expiry != '-1':
            out.append(_access(f'`{shown}` sets an account expiry date on {who}'))
        if given.get('-d', given.get('--lastday')) == '0':
            out.append(_access(f'`{shown}` forces a password change on {who}: its non-interactive logins would fail'))
    return out


_PACKAGE_REMOVE_VERBS = {
    'apt': {'remove', 'purge', 'autoremove', 'autopurge'}, 'apt-get': {'remove', 'purge', 'autoremove'},
    'aptitude': {'remove', 'purge'}, 'dnf': {'remove', 'erase', 'autoremove'}, 'dnf5': {'remove', 'autoremove'},
    'yum': {'remove', 'erase', 'autoremove'}, 'microdnf': {'remove'},
}


def _package_command_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    ops = [a for a in args if not a.startswith('-')]
    removing: list = []
    if name in _PACKAGE_REMOVE_VERBS:
        verbs = [k for k, a in enumerate(ops) if a in _PACKAGE_REMOVE_VERBS[name] or a in ('install', 'reinstall')]
        if verbs:
            k = verbs[0]
            if ops[k] in ('install', 'reinstall'):
                removing = [p[:-1] for p in ops[k + 1:] if p.endswith('-')]
            else:
                removing = ops[k + 1:]
    elif name == 'rpm':
        if any(a == '--erase' or (a.startswith('-') and not a.startswith('--') and 'e' in a[1:]) for a in args):
            removing = ops
    elif name == 'dpkg':
        if any(a in ('-r', '-P', '--remove', '--purge') for a in args):
            removing = ops
    hit = sorted({p for p in removing if _package_base(p) in _ACCESS_PACKAGES})
    if hit:
        return [_access(
            f'`{shown}` removes {", ".join(hit)}: the host would lose SSH, sudo or the Python Ansible needs')]
    return []


def _rm_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    recursive, ops, done = False, [], False
    out = []
    for a in args:
        if not done and a == '--':
            done = True
        elif not done and a.startswith('--'):
            recursive = recursive or a == '--recursive'
            if a == '--no-preserve-root':
                out.append(_banned(f'`{shown}`: --no-preserve-root is never allowed'))
        elif not done and a.startswith('-') and len(a) > 1:
            recursive = recursive or 'r' in a or 'R' in a
        else:
            ops.append(a)
    return out + _removal_command_reasons(shown, ops, recursive, policy)


def _removal_command_reasons(shown: str, ops: list, recursive: bool, policy: GatePolicy) -> list[Hazard]:
    out = []
    for op in ops:
        if recursive:
            problem = _explicit_path_problem(op)
            if problem:
                out.append(_banned(f'`{shown}` removes {op!r} recursively and {problem}: recursive removal takes only'
                           ' explicit absolute paths at least two levels deep, without globs or variables'))
                continue
        norm = _norm(op)
        if norm and not _is_sudoers_path(norm) and not _is_ssh_access_path(norm, policy):
            out += [r.prefixed(f'`{shown}` ') for r in _removal_reasons(norm, policy)]
    return out


def _find_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    paths, _execs, delete = find_parts(args)
    if not delete:
        return []
    return _removal_command_reasons(shown, paths or ['.'], True, policy)


def _sysctl_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    for a in args:
        write = a == '--write' or (a.startswith('-') and not a.startswith('--') and 'w' in a[1:]) \
            or (not a.startswith('-') and '=' in a)
        if write:
            return [_outside(
                f'`{shown}` writes kernel parameters under /proc/sys at once; persist them in /etc/sysctl.d'
                ' (ansible.posix.sysctl) and let its reload apply the file')]
    return []


def _umount_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[Hazard]:
    return [_banned(f'`{shown}` unmounts a filesystem: remediation changes mount options, it does not unmount')]


_COMMAND_CHECKS: dict = {
    **dict.fromkeys(_SHUTDOWN_COMMANDS, _reboot_reasons),
    'init': _init_reasons, 'telinit': _init_reasons,
    'systemctl': _systemctl_reasons,
    'service': _service_reasons, 'invoke-rc.d': _service_reasons, 'update-rc.d': _service_reasons,
    'chkconfig': _service_reasons,
    'kill': _kill_reasons, 'pkill': _kill_reasons, 'killall': _kill_reasons, 'skill': _kill_reasons,
    'loginctl': _kill_reasons,
    'userdel': _user_command_reasons, 'deluser': _user_command_reasons, 'usermod': _user_command_reasons,
    'passwd': _user_command_reasons, 'chage': _user_command_reasons, 'gpasswd': _user_command_reasons,
    **dict.fromkeys(list(_PACKAGE_REMOVE_VERBS) + ['rpm', 'dpkg'], _package_command_reasons),
    'rm': _rm_reasons, 'find': _find_reasons, 'sysctl': _sysctl_reasons, 'umount': _umount_reasons,
}
