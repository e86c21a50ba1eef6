"""Mitogen's connection plugins are judged as the Ansible plugins they stand for: a fresh-login
health check loads Ansible's own plugin (Mitogen pools its connections), and a Mitogen local
connection is refused like Ansible's local one. Real plugin objects from both loaders."""

import os
import types

import ansible_mitogen
import pytest
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader

from ansible_collections.scapforge.remediation.plugins.plugin_utils.health import plain_connection_name
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
        refuse_controller(types.SimpleNamespace(_connection=connection(name)), {})
    assert err.value.reason == "controller"


def test_mitogen_ssh_is_not_refused():
    refuse_controller(types.SimpleNamespace(_connection=connection("mitogen_ssh")), {"machine_id": "not-this-one"})
