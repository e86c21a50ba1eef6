"""The catalog's one exception (``catalog.CatalogError`` is this class)."""


class CatalogError(Exception):
    """Raised for content the catalog cannot use and for lookups that name nothing in it.

    The message is for humans (it names the file or id and, for unknown ids, a few that
    exist); no lxml traceback is chained to it.
    """
