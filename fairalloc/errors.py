"""Exceptions a researcher can act on.

Every error that comes from the user's input (an instance file, a mechanism parameter, a result file)
is a :class:`FairallocError`; the CLI prints its message on one line and exits with code 2.
"""

from __future__ import annotations


class FairallocError(Exception):
    """Base class: bad input that the user can fix. The message names the field and the value."""


class InstanceError(FairallocError, ValueError):
    """An instance (file or arrays) is malformed: the message says which field and which value."""


class ParameterError(FairallocError, ValueError):
    """A mechanism or solver parameter is unknown or has an invalid value."""


class SolverUnavailableError(FairallocError, RuntimeError):
    """The requested solver is not installed or cannot handle the problem class."""
