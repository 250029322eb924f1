"""The package version, in a module of its own so that rooms never import the facade."""

__version__ = "0.1.0"
