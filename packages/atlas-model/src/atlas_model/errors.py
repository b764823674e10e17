"""The model package's error type, apart so that the config and the presets can both raise it without importing
each other."""


class AtlasConfigError(ValueError):
    """An invalid model setting; the message starts with the offending field."""
