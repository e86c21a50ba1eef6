"""Mitogen's connection plugins are judged as the Ansible plugins they stand for: a fresh-login
health check loads Ansible's own plugin (Mitogen pools its connections) or, for a transport
without one here, fails closed; and a Mitogen local connection is refused like Ansible's local
one. Real plugin objects from both loaders, with Mitogen's strategy hooks installed where a run
would have them."""

import json
import os
import subprocess
import sys
import types

import ansible_mitogen
import pytest
from ansible.errors import AnsibleError
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader

from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.plugin_utils.health import (
    FRESH_SSH_ARGS, fresh_connection, plain_connection_name)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError, refuse_controller

connection_loader.add_directory(os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "connection"))


def connection(name):
    return connection_loader.get(name, PlayContext(), None)


@pytest.mark.parametrize("name, plain", [
    ("mitogen_ssh", "ansible.builtin.ssh"),
    ("mitogen_local", "ansible.builtin.local"),
    ("ssh", "ssh"),
    ("local", "local"),
])
def test_a_connection_is_named_by_the_ansible_plugin_it_stands_for(name, plain):
    conn = connection(name)
    assert conn._load_name.endswith(name.rsplit(".", 1)[-1])
    assert plain_connection_name(conn) == plain


@pytest.mark.parametrize("name", ["mitogen_local", "local"])
def test_a_local_connection_is_refused_through_mitogen_too(name):
    with pytest.raises(LoopError) as err:
        refuse_controller(ActionSession(types.SimpleNamespace(_connection=connection(name)), {}), {})
    assert err.value.reason == "controller"


def test_mitogen_ssh_is_not_refused():
    refuse_controller(ActionSession(types.SimpleNamespace(_connection=connection("mitogen_ssh")), {}), {"machine_id": "not-this-one"})


@pytest.fixture
def mitogen_wrappers():
    """Mitogen's strategy hooks installed as a mitogen_linear run installs them (it redirects a
    request for plain ``ssh`` to mitogen_ssh); removed afterwards."""
    from ansible_mitogen.strategy import AnsibleWrappers
    wrappers = AnsibleWrappers()
    wrappers.install()
    try:
        yield
    finally:
        wrappers._remove_wrappers()


def action_on(conn):
    return ActionSession(types.SimpleNamespace(_connection=conn, _play_context=PlayContext(),
                                               _shared_loader_obj=types.SimpleNamespace(connection_loader=connection_loader)),
                         {})


#: run in a fresh interpreter: Ansible's collection loader (which resolves ``ansible.builtin.ssh``)
#: and Mitogen's hooks are installed process-wide, as ansible-playbook installs them
FRESH_UNDER_MITOGEN = r"""
import json, sys, types
sys.path.insert(0, sys.argv[1])
from ansible.plugins.loader import connection_loader, init_plugin_loader
from ansible.playbook.play_context import PlayContext
from ansible_mitogen.strategy import AnsibleWrappers
init_plugin_loader()
AnsibleWrappers().install()
from ansible_collections.scapforge.remediation.plugins.plugin_utils.health import fresh_connection
from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
play_context = PlayContext()
play_context.connection = "ssh"
current = connection_loader.get("ssh", play_context, None)  # redirected to mitogen_ssh, as in a run
current.set_options(direct={"ssh_args": "-o ControlMaster=auto -o ControlPersist=60s -o IdentityFile=/k"})
action = types.SimpleNamespace(_connection=current, _play_context=play_context,
                               _shared_loader_obj=types.SimpleNamespace(connection_loader=connection_loader))
fresh = fresh_connection(ActionSession(action, {}))
print(json.dumps({"current": current._load_name, "fresh_module": type(fresh).__module__,
                  "fresh_ssh_args": fresh.get_option("ssh_args")}))
"""


def test_under_mitogen_a_fresh_login_check_loads_ansibles_own_ssh_without_multiplexing():
    collections = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".collections")
    proc = subprocess.run([sys.executable, "-c", FRESH_UNDER_MITOGEN, collections],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["current"].endswith("mitogen_ssh")
    assert seen["fresh_module"] == "ansible.plugins.connection.ssh"
    assert seen["fresh_ssh_args"] == "-o IdentityFile=/k " + FRESH_SSH_ARGS


@pytest.mark.parametrize("name", ["mitogen_docker", "mitogen_podman", "mitogen_machinectl"])
def test_under_mitogen_a_fresh_login_check_through_another_transport_fails_closed(mitogen_wrappers, name):
    with pytest.raises(AnsibleError, match="fresh login cannot be proved through Mitogen's %s" % name):
        fresh_connection(action_on(connection(name)))
