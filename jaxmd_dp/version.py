"""The package's version, written into model files and run records."""

__version__ = "0.1.0"
