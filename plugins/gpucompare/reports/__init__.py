"""Reports: DuckDB over the lake -> report sets, the HTML page, and the notebook API."""
