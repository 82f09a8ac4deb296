"""Multi-host scaling runs: MXNet's parameter server across the hosts of a scaling group."""
