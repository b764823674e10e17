"""Exceptions a user can act on.

Every class derives from `ValueError` or `FileNotFoundError`, so the `atlas` CLI prints them as one
line (exit 2) instead of a traceback. Messages name the config key or the file at fault.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config mapping has an unknown key, a value of the wrong type or out of range."""


class EmptyCorpusError(ValueError):
    """A source yielded no documents; the message names the source."""


class MissingDataFileError(FileNotFoundError):
    """A file the config or the manifest refers to does not exist; the message names it."""


class DataIntegrityError(ValueError):
    """Prepared data on disk does not match its manifest."""


class ShardChecksumError(DataIntegrityError):
    """A shard (or document-offsets file) has the wrong size or sha256; the message names the file."""


class TokenizerMismatchError(DataIntegrityError):
    """A tokenizer's vocab size or sha256 differs from the manifest; the message names the file."""


class ManifestError(DataIntegrityError):
    """manifest.json is unreadable, of an unknown format version, or internally inconsistent."""


class CorpusFormatError(ValueError):
    """A corpus file or record is malformed (bad JSON, missing text field); the message says where."""
