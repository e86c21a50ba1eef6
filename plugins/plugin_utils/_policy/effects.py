# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What shell commands and Ansible modules read and write: the one table (controller only).

Three readers, one source, so that they cannot drift (issue 16):

* the gate (:mod:`..untrusted_policy`): which paths a command writes, to refuse writes under
  /boot, /proc, /sys and to sudoers or SSH keys; whether a command changes anything at all
  (a read-only command may name sudoers);
* the checkpoint's path analysis (:func:`..checkpoint.paths_touched`): what to save before a
  task runs, and what it changes that files cannot hold (packages, service state);
* the probe allowlist (:mod:`..probes`): find's actions, and a test that every command form
  it accepts only reads by this table.

:func:`command_effect` reads one simple command (an argv list, from
:func:`..shell_split.split_shell` and :func:`..shell_split.expand_command`, which also list
the commands that wrappers, ``sh -c`` and ``find -exec`` run); :data:`MODULE_WRITES` names the
argument through which each module writes.  Pure data and string work; nothing is executed.
"""
from __future__ import annotations

import dataclasses
import posixpath
import re
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import (
    SHELLS, WRAPPERS, find_parts,
)

__all__ = [
    'ACCOUNT_FILES', 'FIND_ACTIONS', 'MODULE_WRITES', 'READS', 'WRAPS', 'WRITES', 'Effect', 'ModuleWrites',
    'command_effect', 'module_write_paths', 'operands', 'sed_in_place', 'within',
]


def within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both normalised, absolute)."""
    return path == root or path.startswith(root.rstrip('/') + '/')


# ============================================================================ commands

READS, WRITES, WRAPS = 'reads', 'writes', 'wraps'


@dataclasses.dataclass(frozen=True)
class Effect:
    """What one simple command does, by the table.

    kind: ``reads`` (it only reads, with these arguments), ``wraps`` (it runs another
      command, whose own effect counts: expand_command lists it next) or ``writes`` (it
      changes files or state; also every command the table does not know, which may write
      whatever it names).
    writes: the paths named in its arguments that it creates, changes or removes, as written.
    metadata_only: those writes change only owner, mode or attributes (chmod, chown, chattr).
    implied: the files it writes without naming them (update-grub: /boot/grub/grub.cfg).
    state: what it changes that files do not hold ("packages", "service state"), or None.
    """

    kind: str
    writes: tuple = ()
    metadata_only: bool = False
    implied: tuple = ()
    state: str | None = None

    @property
    def read_only(self) -> bool:
        return self.kind == READS


_READ = Effect(READS)
_WRITE = Effect(WRITES)
_WRAP = Effect(WRAPS)

#: find's actions: they run a command on what it finds, delete it or write a file.
FIND_ACTIONS = frozenset({'-exec', '-execdir', '-ok', '-okdir', '-delete', '-fprint', '-fprint0', '-fprintf', '-fls'})
_FIND_FILE_ACTIONS = frozenset({'-fprint', '-fprint0', '-fprintf', '-fls'})  # the next word is the file written

ACCOUNT_FILES = ('/etc/passwd', '/etc/shadow', '/etc/group', '/etc/gshadow')
_SUBIDS = ('/etc/subuid', '/etc/subgid')

# Commands that only read, whatever their arguments (shell builtins among them).
_ALWAYS_READ = frozenset({
    'cat', 'grep', 'egrep', 'fgrep', 'zgrep', 'head', 'tail', 'less', 'more', 'wc', 'cut', 'tr', 'stat', 'test', '[',
    '[[', 'ls', 'id', 'getent', 'readlink', 'realpath', 'basename', 'dirname', 'uname', 'echo', 'printf', 'true',
    'false', 'findmnt', 'lsblk', 'dpkg-query', 'set', 'which', 'type', 'lsattr', 'getfacl', 'md5sum', 'sha1sum',
    'sha256sum', 'sha512sum', 'cksum', 'file', 'diff', 'cmp', 'pgrep', 'ps', 'whoami', 'aa-status', 'aa-unconfined',
    'lsmod', 'ss', 'apt-cache',
})

# Commands with a known effect whatever their arguments: (files they write without naming
# them, what they change that is not a file).
_FIXED: dict[str, tuple[tuple, str | None]] = {
    'update-grub': (('/boot/grub/grub.cfg',), None),
    'grubby': ((), 'boot loader entries'),
    'newaliases': (('/etc/aliases.db',), None),
    'aideinit': (('/var/lib/aide',), None),
    'dconf': (('/etc/dconf/db',), None),
    'update-alternatives': (('/etc/alternatives', '/var/lib/dpkg/alternatives'), None),
    'service': ((), 'service state'),
    'apt': ((), 'packages'), 'apt-get': ((), 'packages'), 'aptitude': ((), 'packages'), 'dnf': ((), 'packages'),
    'yum': ((), 'packages'), 'pip': ((), 'packages'), 'pip3': ((), 'packages'), 'snap': ((), 'packages'),
    'rmmod': ((), 'loaded kernel modules'), 'insmod': ((), 'loaded kernel modules'),
    'umount': ((), 'mount state'), 'swapoff': ((), 'mount state'),
    'apparmor_parser': ((), 'loaded AppArmor profiles'), 'aa-enforce': ((), 'loaded AppArmor profiles'),
    'aa-complain': ((), 'loaded AppArmor profiles'), 'aa-disable': ((), 'loaded AppArmor profiles'),
    'setsebool': ((), 'SELinux policy'), 'semanage': ((), 'SELinux policy'), 'restorecon': ((), 'SELinux labels'),
    'chcon': ((), 'SELinux labels'), 'setfiles': ((), 'SELinux labels'),
    'setfattr': ((), 'extended attributes'),
    'kill': ((), 'processes'), 'pkill': ((), 'processes'), 'killall': ((), 'processes'),
    'reboot': ((), 'system state'), 'shutdown': ((), 'system state'), 'halt': ((), 'system state'),
    'poweroff': ((), 'system state'), 'init': ((), 'system state'), 'telinit': ((), 'system state'),
    'hostnamectl': ((), 'system settings'), 'timedatectl': ((), 'system settings'),
    'localectl': ((), 'system settings'),
    'iptables': ((), 'firewall state'), 'ip6tables': ((), 'firewall state'), 'nft': ((), 'firewall state'),
    'ufw': ((), 'firewall state'), 'firewall-cmd': ((), 'firewall state'),
    **dict.fromkeys(('passwd', 'chpasswd', 'chage', 'gpasswd', 'groupadd', 'groupmod', 'groupdel', 'pwconv',
                     'grpconv', 'chsh', 'chfn'), (ACCOUNT_FILES, None)),
    **dict.fromkeys(('useradd', 'userdel', 'usermod'), (ACCOUNT_FILES + _SUBIDS, None)),
}

# Wrappers whose inner command counts, but which change something themselves.
_WRAPPER_STATE = {'xargs': 'arguments built at run time', 'chroot': 'a command run in another root'}

_SYSTEMCTL_READ = frozenset({'is-active', 'is-enabled', 'is-failed', 'show', 'status', 'cat', 'list-units',
                             'list-unit-files', 'list-dependencies', 'list-sockets', 'list-timers', 'get-default'})
_RPM_WRITES = frozenset({'--install', '--upgrade', '--freshen', '--erase', '--import', '--setperms', '--setugids',
                         '--restore', '--rebuilddb', '--initdb'})
_DPKG_READ = frozenset({'-l', '-s', '-L', '-S', '--list', '--status', '--listfiles', '--search', '--get-selections',
                        '--print-architecture', '--compare-versions'})


def operands(args: list, short_vals: str = '', long_vals: tuple = ()) -> list:
    """Arguments that are not options or option values (``--`` ends the options).

    short_vals: short options that take a value (the rest of the word or the next one);
    long_vals: long options that take the next word as value when written without ``=``.
    """
    out, i = [], 0
    while i < len(args):
        tok = args[i]
        if tok == '--':
            return out + args[i + 1:]
        if tok.startswith('--'):
            if '=' not in tok and tok in long_vals:
                i += 1
        elif tok.startswith('-') and len(tok) > 1:
            for k, ch in enumerate(tok[1:], start=1):
                if ch in short_vals:
                    if k == len(tok) - 1:
                        i += 1
                    break
        else:
            out.append(tok)
        i += 1
    return out


def sed_in_place(args: list) -> bool:
    """Whether sed arguments edit files in place (``-i``, ``-i.bak``, ``-ni``, ``--in-place``)."""
    for a in args:
        if a.startswith('--in-place'):
            return True
        if a.startswith('-') and not a.startswith('--'):
            for ch in a[1:]:
                if ch == 'i':
                    return True
                if ch in 'efl':  # takes a value: the rest of the word or the next one
                    break
    return False


def _writes(paths: t.Iterable, metadata_only: bool = False, state: str | None = None) -> Effect:
    return Effect(WRITES, writes=tuple(paths), metadata_only=metadata_only, state=state)


def _copy_like(name: str, args: list) -> Effect:
    """cp, install, ln: the target (``-t DIR``, ``--target-directory``, else the last operand);
    ``install -d``: every operand (directories it creates)."""
    ops = operands(args, 'tSgmo' if name == 'install' else 'tS', ('--target-directory', '--suffix'))
    target = [a.split('=', 1)[1] for a in args if a.startswith('--target-directory=')]
    for k, a in enumerate(args):
        if a == '-t' and k + 1 < len(args):
            target.append(args[k + 1])
    if name == 'install' and any(a in ('-d', '--directory') for a in args):
        return _writes(ops)
    return _writes(target or ops[-1:])


def _sed(name: str, args: list) -> Effect:
    if sed_in_place(args):
        ops = operands(args, 'efl', ('--expression', '--file', '--line-length'))
        scripted = any(a in ('-e', '-f', '--expression', '--file') or a.startswith(('--expression=', '--file='))
                       for a in args)
        return _writes(ops if scripted else ops[1:])
    if any(re.search(r'(^|[;}/\s])[wWe]\s', a) for a in args):  # the w/W/e commands of a script
        return _WRITE
    return _READ


def _awk(name: str, args: list) -> Effect:
    if any('system' in a for a in args):
        return Effect(WRITES, state='commands built at run time (awk system())')
    if any(re.search(r'print[f]?[^;}]*[>|]', a) or a.startswith('-i') for a in args):
        return _WRITE
    return _READ


def _find(name: str, args: list) -> Effect:
    """find: -delete removes what it finds below its start paths, -fprint* write a file;
    -exec and the like run a command (expand_command lists it, ``{}`` replaced)."""
    paths, _execs, delete = find_parts(args)
    written = list(paths or ['.']) if delete else []
    for k, a in enumerate(args):
        if a in _FIND_FILE_ACTIONS and k + 1 < len(args):
            written.append(args[k + 1])
    if delete or written:
        return _writes(written)
    if any(a in FIND_ACTIONS for a in args):
        return _WRAP
    return _READ


def _sort(name: str, args: list) -> Effect:
    out = []
    for k, a in enumerate(args):
        if a in ('-o', '--output') and k + 1 < len(args):
            out.append(args[k + 1])
        elif a.startswith('--output='):
            out.append(a.split('=', 1)[1])
        elif a.startswith('-o') and len(a) > 2:
            out.append(a[2:])
    return _writes(out) if out else _READ


def _uniq(name: str, args: list) -> Effect:
    ops = [a for a in args if not a.startswith('-')]
    return _writes(ops[1:2]) if len(ops) > 1 else _READ


def _sysctl(name: str, args: list) -> Effect:
    if any(a in ('-w', '-p', '--system', '--load', '--write') or a.startswith('-p') or '=' in a for a in args):
        return Effect(WRITES, state='runtime kernel parameters')
    return _READ


def _rpm(name: str, args: list) -> Effect:
    query = any(a.startswith(('-q', '--query', '-V', '--verify')) for a in args)
    if query and not any(a in _RPM_WRITES or re.match(r'^-[iUFe]', a) for a in args):
        return _READ
    return Effect(WRITES, state='packages')


def _dpkg(name: str, args: list) -> Effect:
    return _READ if args and args[0] in _DPKG_READ else Effect(WRITES, state='packages')


def _systemctl(name: str, args: list) -> Effect:
    words = [a for a in args if not a.startswith('-')]
    return _READ if not words or words[0] in _SYSTEMCTL_READ else Effect(WRITES, state='service state')


def _auditctl(name: str, args: list) -> Effect:
    return _READ if args and all(a in ('-l', '-s', '-v') for a in args) else Effect(WRITES, state='loaded audit rules')


def _augenrules(name: str, args: list) -> Effect:
    return Effect(WRITES, implied=('/etc/audit/audit.rules',),
                  state='loaded audit rules' if '--load' in args else None)


def _modprobe(name: str, args: list) -> Effect:
    if any(a in ('-n', '--dry-run', '-c', '--showconfig', '--show-depends')
           or re.fullmatch(r'-[a-zA-Z]*n[a-zA-Z]*', a) for a in args):
        return _READ
    return Effect(WRITES, state='loaded kernel modules')


def _mount(name: str, args: list) -> Effect:
    if all(a in ('-l', '--show-labels') for a in args) or (name == 'swapon' and any(
            a in ('-s', '--summary', '--show') or a.startswith('--show=') for a in args)):
        return _READ
    return Effect(WRITES, state='mount state')


def _crontab(name: str, args: list) -> Effect:
    return _READ if '-l' in args and not any(a in ('-r', '-e', '-i') for a in args) \
        else Effect(WRITES, state='user crontab')


def _authselect(name: str, args: list) -> Effect:
    ops = operands(args)
    if ops[:1] and ops[0] in ('current', 'check', 'list', 'list-features', 'show', 'requirements', 'test'):
        return _READ
    return Effect(WRITES, implied=('/etc/authselect', '/etc/pam.d', '/etc/nsswitch.conf'))


def _crypto_policies(name: str, args: list) -> Effect:
    if args and all(a in ('--show', '--is-applied', '--check') for a in args):
        return _READ
    return Effect(WRITES, implied=('/etc/crypto-policies',))


def _visudo(name: str, args: list) -> Effect:
    if any(a == '--check' or (a.startswith('-') and not a.startswith('--') and 'c' in a) for a in args):
        return _READ
    return _WRITE


def _sshd(name: str, args: list) -> Effect:
    return _READ if any(a in ('-T', '-t') for a in args) else _WRITE  # else it starts a daemon


def _date(name: str, args: list) -> Effect:
    return _WRITE if any(a.startswith(('-s', '--set')) for a in args) else _READ


def _hostname(name: str, args: list) -> Effect:
    return _READ if all(a.startswith('-') for a in args) else _WRITE


def _perl(name: str, args: list) -> Effect:
    if any(a.startswith('-') and not a.startswith('--') and 'i' in a[1:] for a in args):
        return _writes(operands(args, 'eEIMm'))
    return _WRITE


def _shell(name: str, args: list) -> Effect:
    """sh/bash...: ``-c TEXT`` runs TEXT (expand_command lists its commands); a script file or
    a bare shell runs what the table cannot see."""
    has_c, i = False, 0
    while i < len(args) and args[i][:1] in ('-', '+') and len(args[i]) > 1 and args[i] != '--':
        has_c = has_c or 'c' in args[i][1:]
        i += 2 if args[i][-1] in 'oO' else 1
    if has_c:
        return _WRAP
    rest = args[i + 1:] if args[i:i + 1] == ['--'] else args[i:]
    return Effect(WRITES, state='runs a shell script (%s)' % rest[0] if rest else 'runs an interactive shell')


def _command_builtin(name: str, args: list) -> Effect:
    return _READ if args[:1] and args[0] in ('-v', '-V') else _WRAP


_GUARDED: dict[str, t.Callable[[str, list], Effect]] = {
    'tee': lambda name, args: _writes(operands(args)),
    'dd': lambda name, args: _writes(a[3:] for a in args if a.startswith('of=')),
    'cp': _copy_like, 'install': _copy_like, 'ln': _copy_like,
    **dict.fromkeys(('mv', 'touch'), lambda name, args: _writes(operands(args, 'tSmrd'))),
    'mkdir': lambda name, args: _writes(operands(args, 'm')),
    **dict.fromkeys(('rmdir', 'shred', 'unlink', 'rm'), lambda name, args: _writes(operands(args))),
    'truncate': lambda name, args: _writes(operands(args, 'sr', ('--size', '--reference'))),
    **dict.fromkeys(('chmod', 'chown', 'chgrp'), lambda name, args: _writes(
        operands(args) if any(a.startswith('--reference') for a in args) else operands(args)[1:],
        metadata_only=True)),
    'chattr': lambda name, args: _writes([a for a in operands(args, 'vpmMxX') if a.startswith('/')], True,
                                         'file attributes'),
    'setfacl': lambda name, args: _writes([a for a in operands(args, 'vpmMxX') if a.startswith('/')], True, 'ACLs'),
    'sed': _sed, 'perl': _perl,
    'awk': _awk, 'gawk': _awk, 'mawk': _awk,
    'find': _find, 'sort': _sort, 'uniq': _uniq,
    'sysctl': _sysctl, 'rpm': _rpm, 'dpkg': _dpkg, 'systemctl': _systemctl, 'auditctl': _auditctl,
    'augenrules': _augenrules, 'modprobe': _modprobe, 'mount': _mount, 'swapon': _mount, 'crontab': _crontab,
    'authselect': _authselect, 'update-crypto-policies': _crypto_policies, 'visudo': _visudo, 'sshd': _sshd,
    'date': _date, 'hostname': _hostname, 'command': _command_builtin,
}


def command_effect(argv: t.Sequence[str]) -> Effect:
    """What the simple command ``argv`` does (its program is argv[0], any directory).

    Wrappers (sudo, env, xargs..., eval, su -c, ``sh -c``) are ``wraps``: the command they
    run is listed after them by :func:`..shell_split.expand_command`.  Redirections are not
    in argv: the caller has them (``ShellCommand.writes``).  A program the table does not
    know is ``writes`` with no named paths: it may change what it names.
    """
    if not argv:
        return _READ
    name, args = posixpath.basename(str(argv[0])), [str(a) for a in argv[1:]]
    if name in _ALWAYS_READ:
        return _READ
    guard = _GUARDED.get(name)
    if guard is not None:
        return guard(name, args)
    if name in _FIXED:
        implied, state = _FIXED[name]
        return Effect(WRITES, implied=implied, state=state)
    if name in SHELLS:
        return _shell(name, args)
    if name == 'busybox' and args[:1] and args[0] in SHELLS:
        return _shell(args[0], args[1:])
    if name in _WRAPPER_STATE:
        return Effect(WRAPS, state=_WRAPPER_STATE[name])
    if name == 'flock':  # flock FILE COMMAND: it creates its lock file
        ops = operands(args, 'wEc', ('--timeout', '--conflict-exit-code', '--command'))
        return Effect(WRAPS, writes=tuple(ops[:1]))
    if name in WRAPPERS or name in ('eval', 'su', 'runuser'):
        return _WRAP
    return _WRITE


# ============================================================================ modules

@dataclasses.dataclass(frozen=True)
class ModuleWrites:
    """The argument through which a module writes a file.

    keys: the argument and its aliases, first given wins; default: the path when none is
    given (None: the task then names no file); directory_of: the path is a directory, and
    the file is its entry named by this argument (pamd, sudoers); relative_dir: a relative
    value lies in this directory (cron's cron_file).
    """

    keys: tuple
    default: str | None = None
    directory_of: str | None = None
    relative_dir: str | None = None


#: module FQCN -> the argument through which it writes (option names and defaults are the
#: modules' own DOCUMENTATION: ansible-core 2.19, ansible.posix, community.general).
MODULE_WRITES: dict[str, ModuleWrites] = {
    'ansible.builtin.lineinfile': ModuleWrites(('path', 'dest', 'destfile', 'name')),
    'ansible.builtin.blockinfile': ModuleWrites(('path', 'dest', 'destfile', 'name')),
    'ansible.builtin.replace': ModuleWrites(('path', 'dest', 'destfile', 'name')),
    'ansible.builtin.copy': ModuleWrites(('dest',)),
    'ansible.builtin.template': ModuleWrites(('dest',)),
    'ansible.builtin.file': ModuleWrites(('path', 'dest', 'name')),
    'ansible.builtin.assemble': ModuleWrites(('dest',)),
    'ansible.builtin.unarchive': ModuleWrites(('dest',)),
    'ansible.builtin.get_url': ModuleWrites(('dest',)),
    'ansible.builtin.cron': ModuleWrites(('cron_file',), relative_dir='/etc/cron.d'),
    'community.general.ini_file': ModuleWrites(('path', 'dest')),
    'community.general.kernel_blacklist': ModuleWrites(('blacklist_file',),
                                                       default='/etc/modprobe.d/blacklist-ansible.conf'),
    'community.general.pamd': ModuleWrites(('path',), default='/etc/pam.d', directory_of='name'),
    'community.general.sudoers': ModuleWrites(('sudoers_path',), default='/etc/sudoers.d', directory_of='name'),
    'ansible.posix.authorized_key': ModuleWrites(('path',)),
    'ansible.posix.sysctl': ModuleWrites(('sysctl_file',), default='/etc/sysctl.conf'),
    'ansible.posix.mount': ModuleWrites(('fstab',), default='/etc/fstab'),
}


def module_write_paths(fqcn: str, args: dict) -> list:
    """The values of the write arguments a task gives (aliases included, as written), for the
    gate's checks on them; [] for a module not in :data:`MODULE_WRITES`."""
    spec = MODULE_WRITES.get(fqcn)
    if spec is None or not isinstance(args, dict):
        return []
    return [args[k] for k in spec.keys if isinstance(args.get(k), str)]
