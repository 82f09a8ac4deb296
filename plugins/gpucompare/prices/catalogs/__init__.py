"""Other providers' price catalogs, imported into the lake's price history.

Two formats are read, each by its own module, both into rows of ``schema.PRICES_SCHEMA``:

* ``skypilot``: the public SkyPilot catalog, one ``vms.csv`` per cloud (``catalogs.skypilot``);
* ``azure``: pages of the Azure Retail Prices API (``catalogs.azure``).

``catalogs.common`` holds what both share (reading a location, the field checks, one row per
instance type, region and market, ``CatalogImport``); ``catalogs.importer`` picks the format,
stores an import as its load of the lake's ``prices`` table, and knows the shipped samples.
"""
