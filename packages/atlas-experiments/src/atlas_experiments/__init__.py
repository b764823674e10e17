"""The `atlas` command line of the ATLAS reproduction."""

__version__ = "0.4.0"
