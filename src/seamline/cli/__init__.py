"""The ``seamline`` command line."""
