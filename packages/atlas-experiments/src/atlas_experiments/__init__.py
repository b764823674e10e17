"""The `atlas` command line of the ATLAS reproduction."""

__version__ = "0.1.0"
