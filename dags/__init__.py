"""The DAG modules, shipped in the package as ``gpucompare.dags`` (with ``config/fleet.yaml``).

pyproject.toml maps this folder to ``gpucompare.dags``; ``gpucompare dags install DIR``
writes the small files that run these modules into a deployment's DAGs folder.
"""
