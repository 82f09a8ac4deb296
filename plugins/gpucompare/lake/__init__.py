"""The results lake: Delta tables of results, prices and exchange rates, their schema, ingest,
migration."""
