"""Errors zeroplan raises on bad input. Only cli/common.py (the error boundary) catches them, prints one line and exits."""


class ZeroplanError(Exception):
    """Bad input the user can fix; the message is one line meant for them."""


class SpecError(ZeroplanError):
    """A model, hardware, plan or DeepSpeed file (or field) that cannot be used."""


class PresetNotFoundError(ZeroplanError):
    """A preset name that is not in the registry; the message lists close matches."""


class UsageError(ZeroplanError):
    """The command line itself is wrong (an unknown rule id, clashing options); the CLI exits 2, as click does."""
