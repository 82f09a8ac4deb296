"""The Airflow side: the DAGs' task groups and assets, the UI plugin, provider info, deployment,
the DAG files."""
