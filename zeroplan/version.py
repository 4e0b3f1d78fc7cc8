"""zeroplan's version, on the ground floor so that every report can name it."""

__version__ = "0.1.0"
