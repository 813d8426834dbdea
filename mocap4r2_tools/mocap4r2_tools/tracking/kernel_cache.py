"""Where the tracker's compiled kernels are kept between processes, chosen once at import.

numba's ``cache=True`` looks for a writable place when a function is decorated: the
``__pycache__`` next to the module, else numba's per-user cache directory (or
``NUMBA_CACHE_DIR`` when set). Where there is none (a read-only container image,
``HOME=/nonexistent``, systemd's DynamicUser) decorating raises ``RuntimeError: cannot
cache function '_quat_matrix': no locator available``, and importing the kernels would
kill the node. So :data:`CACHE` is chosen here, in this order:

1. ``numba``: numba's own place, when it finds one (a probe function of this directory
   is decorated with ``cache=True``; numba picks the place by the function's file, and
   the kernels' file is in this directory).
2. ``private``: ``mocap4r2-numba-<uid>`` in the temporary directory, created mode 0700
   and used only while it is a directory of ours that nobody else can write to: numba's
   cache files are pickles that a process loads and runs, so a directory another user
   could have prepared is never read. Kept for the next process (a DynamicUser service's
   private /tmp lives as long as the service). Where that name is taken by someone
   else, a fresh directory of this process only (``mkdtemp``, removed at exit).
3. ``none``: nothing is writable, not even the temporary directory. The kernels are
   compiled in memory in every process (11-16 s on this 2-core machine under load).

:func:`kernel` is ``numba.njit`` with that choice; :data:`CACHE`'s ``note`` says what
was chosen and why, for the one line a process logs about it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numba  # type: ignore[import-untyped]

F = TypeVar("F", bound=Callable[..., Any])

NUMBA = "numba"
PRIVATE = "private"
NONE = "none"


@dataclass(frozen=True)
class KernelCache:
    """Where compiled kernels are kept: ``kind`` (numba, private or none), the
    ``directory`` of a private cache ("" otherwise) and a ``note`` for the log ("" when
    numba's own place works, which needs no word)."""

    kind: str
    directory: str = ""
    note: str = ""


def _probe() -> None:
    """Decorated with ``cache=True`` to ask numba whether it has a place for this directory."""


@contextlib.contextmanager
def _numba_cache_dir(directory: str | None) -> Iterator[None]:
    """The ``CACHE_DIR`` of numba (what NUMBA_CACHE_DIR sets) while functions are decorated:
    its locator reads it then, so the setting never reaches other code's functions."""
    if directory is None:
        yield
        return
    saved = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = directory
    try:
        yield
    finally:
        numba.config.CACHE_DIR = saved


def _numba_can_cache(directory: str | None = None) -> bool:
    try:
        with _numba_cache_dir(directory):
            numba.njit(cache=True)(_probe)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return False
    return True


def _ours(path: str) -> bool:
    """A real directory (not a link) of this user that nobody else can write to or read."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _private_directory() -> str | None:
    """The private cache directory (made if missing), or None when none can be made."""
    try:
        base = tempfile.gettempdir()  # TMPDIR, /tmp, /var/tmp, ...: the first writable one
    except OSError:  # FileNotFoundError: "No usable temporary directory found"
        return None
    path = os.path.join(base, f"mocap4r2-numba-{os.getuid()}")
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(path, 0o700)
    if _ours(path):
        return path
    try:  # the name is someone else's: a directory of this process only
        own = tempfile.mkdtemp(prefix="mocap4r2-numba-", dir=base)
    except OSError:
        return None
    atexit.register(shutil.rmtree, own, ignore_errors=True)
    return own


def choose() -> KernelCache:
    """Numba's own place, else a private directory in the temporary one, else none."""
    if _numba_can_cache():
        return KernelCache(NUMBA)
    nowhere = (
        "numba has no writable cache here (the tracking package's __pycache__ and numba's "
        "per-user cache directory are read-only or missing; NUMBA_CACHE_DIR chooses one)"
    )
    directory = _private_directory()
    if directory is not None and _numba_can_cache(directory):
        return KernelCache(
            PRIVATE, directory, f"{nowhere}: the tracker's compiled kernels are kept in {directory}"
        )
    return KernelCache(
        NONE,
        "",
        f"{nowhere}, nor is the temporary directory: the tracker's kernels are compiled "
        "without a cache, in every start (11-16 s)",
    )


CACHE = choose()


def kernel(func: F) -> F:
    """``numba.njit`` with the cache of :data:`CACHE` (none at all when nothing is writable)."""
    with _numba_cache_dir(CACHE.directory if CACHE.kind == PRIVATE else None):
        compiled = numba.njit(cache=CACHE.kind != NONE)(func)
    return cast(F, compiled)
