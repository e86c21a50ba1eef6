from ansible_collections.scapforge.remediation.plugins.plugin_utils.health import FRESH_SSH_ARGS, fresh_ssh_args


def test_multiplexing_is_dropped_and_the_rest_kept():
    user = "-C -o ControlMaster=auto -o ControlPersist=60s -o IdentityFile=/k/id -oControlPath=/x/%h -o ProxyJump=bastion"
    assert fresh_ssh_args(user) == "-C -o IdentityFile=/k/id -o ProxyJump=bastion " + FRESH_SSH_ARGS


def test_empty_or_missing_args():
    assert fresh_ssh_args(None) == FRESH_SSH_ARGS
    assert fresh_ssh_args("") == FRESH_SSH_ARGS


def test_spaced_option_values_survive():
    assert fresh_ssh_args('-o "ProxyCommand=ssh -W %h:%p jump"') == "-o 'ProxyCommand=ssh -W %h:%p jump' " + FRESH_SSH_ARGS
