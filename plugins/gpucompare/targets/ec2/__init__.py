"""The ``ec2`` target: ``target`` (``Ec2Target``, a thin coordinator of the parts below),
``guard`` (cost guard, time-to-live), ``launch`` (RunInstances, the launch plan),
``placement`` (where a launch may go), ``readiness`` (running, SSM agent online, still alive),
``ssm`` (commands through SSM Run Command and their one wait, progress read back from S3),
``deploy`` (the worker bundle and image pull), ``sweeps`` (one command per sweep and its wait),
``storage`` (the run's S3 keys, bundle upload, results), ``teardown`` (termination),
``states`` (the one state machine of SSM statuses and instance states), ``clients`` (the
hooks), ``aws_errors`` (what a botocore error says), ``options`` (the target options, tags and
limits), ``commands`` (the commands sent through SSM), ``iam`` (the IAM policy) and ``channel``
(the SSM host channel the scaling launcher uses)."""
