"""Shared pytest fixtures (see the module docstring once written)."""
