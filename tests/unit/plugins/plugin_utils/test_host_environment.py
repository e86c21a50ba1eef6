"""Issue 18 item 5: the environment facts the Worker reads (pure parsing of one command's output)."""

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_environment as E

#: what the command printed on a lab host (systemd-nspawn, Debian 12): nspawn's bounding set
#: keeps neither CAP_SYS_MODULE, CAP_SYS_TIME nor CAP_AUDIT_CONTROL (bits 16, 25, 30)
NSPAWN = """init systemd
virt systemd-nspawn
capbnd 000001ffbdfeffff
ro /proc/sys
ro /sys
ro /proc/sysrq-trigger
ro /sys/fs/cgroup
ro /proc/sys
"""


def test_a_container_says_its_kind_init_what_it_lacks_and_what_is_read_only():
    facts = E.parse(NSPAWN)
    assert facts == {"init": "systemd", "virtualization": "systemd-nspawn",
                     "lacks": ["CAP_SYS_MODULE", "CAP_SYS_TIME", "CAP_AUDIT_CONTROL"],
                     "read_only": ["/proc/sys", "/sys", "/sys/fs/cgroup"]}
    text = E.describe(facts)
    assert text.startswith("a systemd-nspawn guest; init is systemd; it lacks: CAP_SYS_MODULE (it cannot load")
    assert ", CAP_AUDIT_CONTROL (it cannot load audit rules" in text
    assert text.endswith("); read-only: /proc/sys, /sys, /sys/fs/cgroup")


def test_a_full_bounding_set_lacks_nothing_and_odd_output_says_nothing():
    facts = E.parse("init systemd\nvirt none\ncapbnd 000001ffffffffff\n")
    assert (facts["lacks"], E.describe(facts)) == ([], "not virtualized; init is systemd")
    assert E.parse("capbnd zz\nnoise\n")["lacks"] == []
    assert E.describe(E.parse("")) == ""


class _Session:
    def __init__(self, result=None, error=None):
        self.result, self.error = result, error

    def run_command(self, command):
        assert command == E.COMMAND
        if self.error:
            raise self.error
        return self.result


def test_read_never_fails_the_run():
    assert E.read(_Session({"rc": 0, "stdout": NSPAWN}))["virtualization"] == "systemd-nspawn"
    assert E.read(_Session({"rc": 1, "stdout": NSPAWN})) == {}
    assert E.read(_Session(error=OSError("connection lost"))) == {}
