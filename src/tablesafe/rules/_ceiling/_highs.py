"""A HiGHS instance that prints nothing on standard output.

HiGHS (highspy 1.16) prints its banner ("Running HiGHS ...") on standard
output in the constructor of ``Highs``, before any option can be set:
``output_flag`` is an option of the instance, and neither highspy nor HiGHS
offers a way to construct one silently (no constructor argument, no
environment variable). A command whose standard output is a JSON or CSV
document (``tablesafe attack reconstruct --format json``) then no longer
parses. So the constructor alone runs with file descriptor 1 pointed at
standard error, and the instance's output is switched off before it is
returned: nothing HiGHS writes reaches standard output, and the banner stays
visible on standard error.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

# dup2 on descriptor 1 is process-wide: two threads swapping it at once
# could leave it pointing at standard error.
_FD_LOCK = threading.Lock()


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (HiGHS writes through them)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at standard error for the block, then restore it."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        # No usable descriptor 1 (closed, or a stream without one): nothing to guard.
        yield
        return
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        yield
        return
    try:
        yield
    finally:
        # Whatever HiGHS buffered goes to standard error, before 1 is restored.
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)


def silent_highs() -> Any:
    """A new ``highspy.Highs`` with its output off; its construction prints nothing on stdout.

    Returns:
        The instance, with ``output_flag`` false.
    """
    import highspy

    with _FD_LOCK, _stdout_to_stderr():
        h = highspy.Highs()  # type: ignore[no-untyped-call]
        h.setOptionValue("output_flag", False)
    return h
