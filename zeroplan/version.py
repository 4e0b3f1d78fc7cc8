"""zeroplan's version, on the ground floor so that every report can name it."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1  # the JSON documents' layout (docs/json.md); raised on a change that breaks a reader
