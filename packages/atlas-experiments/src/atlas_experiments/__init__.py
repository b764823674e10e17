"""The `atlas` command line of the ATLAS reproduction."""

__version__ = "0.2.0"
