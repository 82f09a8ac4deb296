"""The ``ec2`` target, in eight modules: ``target`` (the Target, its steps and teardown),
``launch`` (RunInstances and the waits until the instance and its SSM agent are ready),
``ssm`` (commands through SSM Run Command, progress read back from S3), ``storage`` (the
run's S3 keys and the worker bundle upload), ``aws_errors`` (what a botocore error says),
``options`` (the target options, tags and limits), ``commands`` (the commands sent through
SSM) and ``channel`` (the SSM host channel the scaling launcher uses)."""
