"""Keep what solvers print from C off standard output.

HiGHS (1.16 prints a banner from the ``Highs()`` constructor, before any option can silence it),
cuPDLP-C (``printf`` per free row), Ipopt inside CasADi and SCIP write to file descriptor 1 directly,
below Python's ``sys.stdout``. A program that prints a JSON document on stdout — ``fairalloc solve``,
or a user's script — would then print invalid JSON. :func:`c_output_off_stdout` points file
descriptor 1 elsewhere while a solver runs:

- to stderr when the ``fairalloc.solvers`` logger is enabled for INFO (the CLI's ``-v``), so solver
  logs stay visible;
- to the null device otherwise.

The redirection is process-wide (a file descriptor is), so it is reference-counted: nested or
concurrent users (threads) share one redirection, which the last one out undoes. C's ``stdout``
buffer is flushed before and after, so text a solver left buffered cannot reach the real stdout
later (at exit).

:func:`document_stdout` is the CLI's form: for a whole command it keeps fd 1 redirected and hands
back a stream on the original stdout, which only the JSON (or table) document is written to.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["c_output_off_stdout", "document_stdout"]

log = logging.getLogger("fairalloc.solvers")

_lock = threading.Lock()
_depth = 0
_saved_fd = -1


def _load_fflush() -> Any:
    with contextlib.suppress(Exception):
        return ctypes.cdll.msvcrt.fflush if sys.platform == "win32" else ctypes.CDLL(None).fflush
    return None


_fflush = _load_fflush()


def _flush_c_stdout() -> None:
    """``fflush(NULL)``: push out whatever C stdio holds (a pipe makes C's stdout fully buffered)."""
    if _fflush is not None:
        with contextlib.suppress(Exception):
            _fflush(None)


def _flush_python_stdout() -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()


def _target_fd() -> int:
    """A new descriptor for where C output goes now: stderr when solver logging is on, else the null
    device."""
    if log.isEnabledFor(logging.INFO):
        return os.dup(2)
    return os.open(os.devnull, os.O_WRONLY)


@contextlib.contextmanager
def c_output_off_stdout() -> Iterator[None]:
    """While active, file descriptor 1 does not lead to the process's standard output (see the module
    docstring)."""
    global _depth, _saved_fd
    with _lock:
        if _depth == 0:
            _flush_python_stdout()
            _flush_c_stdout()
            saved = os.dup(1)
            target = _target_fd()
            try:
                os.dup2(target, 1)
            finally:
                os.close(target)
            _saved_fd = saved
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _flush_c_stdout()
                os.dup2(_saved_fd, 1)
                os.close(_saved_fd)
                _saved_fd = -1


@contextlib.contextmanager
def document_stdout() -> Iterator[TextIO]:
    """For one CLI command: yield the stream the document goes to, with fd 1 redirected meanwhile.

    When ``sys.stdout`` is the process's fd 1 (a terminal, a pipe, a file), the document stream is a
    duplicate of that descriptor, and ``sys.stdout`` is pointed at it so ``print`` reaches the reader;
    C code writing to fd 1 goes to stderr (``-v``) or nowhere. When ``sys.stdout`` is something else
    (pytest's capture, a ``StringIO``), that object is the document stream and only fd 1 is redirected.
    """
    original = sys.stdout
    try:
        real = original is not None and original.fileno() == 1
    except (AttributeError, ValueError, io.UnsupportedOperation):
        real = False
    with c_output_off_stdout():
        if not real:
            yield original
            return
        with _lock:
            saved = _saved_fd  # the real stdout, kept by c_output_off_stdout
        doc = os.fdopen(os.dup(saved), "w", encoding=original.encoding, errors=original.errors,
                        newline=None, closefd=True)
        sys.stdout = doc
        try:
            yield doc
        finally:
            sys.stdout = original
            try:
                doc.flush()
            finally:
                with contextlib.suppress(OSError):
                    doc.close()
