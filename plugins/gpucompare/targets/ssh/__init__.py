"""The ``ssh`` target, in four modules: ``target`` (the Target and its steps), ``options`` (the
target options and their limits), ``commands`` (the shell scripts and command lines run on the
host) and ``channel`` (the host channel the scaling launcher uses)."""
