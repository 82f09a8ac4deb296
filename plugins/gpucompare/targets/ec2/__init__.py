"""The ``ec2`` target, in four modules: ``target`` (the Target and its steps), ``options`` (the
target options, tags and limits), ``commands`` (the commands sent through SSM) and ``channel``
(the SSM host channel the scaling launcher uses)."""
