"""Configuration: the patterns every user value is checked against, the fleet file and scaling profiles."""
