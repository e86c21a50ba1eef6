"""The catalog's one exception (``catalog.CatalogError`` is this class)."""

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError


class CatalogError(ScapforgeError):
    """Raised for content the catalog cannot use and for lookups that name nothing in it.

    The message is for humans (it names the file or id and, for unknown ids, a few that
    exist); no lxml traceback is chained to it.
    """

    kind = "content"
