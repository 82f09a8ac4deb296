"""The report queries (DuckDB) and the Athena DDL, shipped in the package as ``gpucompare.sql``.

Not code: pyproject.toml maps this folder to ``gpucompare.sql`` so the queries are package
data, found with ``gpucompare.resources.sql_file(name)`` wherever gpucompare is installed.
"""
