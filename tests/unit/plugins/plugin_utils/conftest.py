"""Fixtures the plugin_utils unit tests share."""

import os
from pathlib import Path

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog


@pytest.fixture(scope="module")
def catalog():
    """The Debian 12 datastream the lab pins (``make lab-build`` fetches it)."""
    path = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab")) / "content" / "ssg-debian12-ds.xml"
    if not path.is_file():
        pytest.fail("%s missing: run `make lab-build`" % path)
    return Catalog.from_path(path)
