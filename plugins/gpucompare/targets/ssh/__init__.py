"""The ``ssh`` target, in six modules: ``target`` (the Target and its steps), ``connection``
(the verified SSH session with reconnection and retries), ``remote_files`` (SFTP writes,
uploads, downloads, progress and log tails on the host), ``options`` (the target options and
their limits), ``commands`` (the shell scripts and command lines run on the host) and
``channel`` (the host channel the scaling launcher uses)."""
