"""The package version, read by the records a conversion writes and by the CLI."""

__version__ = "0.1.0"
