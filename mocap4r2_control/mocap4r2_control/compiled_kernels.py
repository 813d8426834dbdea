"""The encoder's compiled kernels (numba), each compiled or loaded from numba's cache once
per process and logged once either way.

Why a loader of their own: a kernel must be had before the first frame (compiling takes
1-2 s, loading from the cache about 0.05 s once numba is imported, importing numba 0.4 s),
and where it cannot be had (numba missing, no writable cache on a read-only install, a
compile error) the encoder keeps its numpy path, which gives the same bytes, and says why
once. MocapSystemNode asks for the kernels when it is built, before its vendor's socket is
opened in configure: time spent there would queue frames that are then published late.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["KernelLoader", "kernel_input"]

LOG = logging.getLogger("mocap4r2.compiled_kernels")


class KernelLoader:
    """One numba kernel of the encoder, compiled or loaded from numba's cache once per
    process (the first :meth:`load`), logged once either way. ``prepare`` calls the
    compiled function with a frame's types (compiling it, or loading it from the cache)
    and gives what :meth:`load` hands out; any exception it raises means the kernel
    cannot be used here (its message says why), and the encoder keeps numpy."""

    def __init__(self, function: Callable[..., Any], prepare: Callable[[Any], Any], what: str) -> None:
        self.function = function
        self.prepare = prepare
        self.what = what
        self.lock = threading.Lock()
        self.done = False
        self.loaded: Any = None
        self.seconds = 0.0
        self.note = ""

    def _compile(self) -> tuple[Any, str]:
        try:
            import numba  # type: ignore[import-untyped]
        except ImportError as exc:
            return None, f"numba is not importable ({exc})"
        try:
            compiled = numba.njit(cache=True, nogil=True)(self.function)
        except RuntimeError as exc:  # "cannot cache function ...: no locator available"
            return None, f"numba has no writable cache here ({exc}; NUMBA_CACHE_DIR chooses one)"
        try:
            return self.prepare(compiled), ""
        except Exception as exc:  # a numba error of any kind: the numpy path still works
            return None, f"numba could not compile it ({type(exc).__name__}: {exc})"

    def load(self) -> Any:
        """What ``prepare`` gave, on the first call of the process; None where the kernel
        cannot be had (logged once, with why)."""
        with self.lock:
            if not self.done:
                start = time.perf_counter()
                self.loaded, self.note = self._compile()
                self.seconds = time.perf_counter() - start
                self.done = True
                if self.loaded is None:
                    LOG.warning("%s are encoded with numpy, not the compiled pass: %s", self.what, self.note)
                else:
                    LOG.info("compiled %s pass ready in %.2f s", self.what, self.seconds)
            return self.loaded


def kernel_input(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` as a kernel takes it: C-contiguous and writeable, the same dtype and
    values; a copy only where it is not (a frame decoded from recorded CDR is strided,
    read-only views of the bytes). numba compiles a kernel for one layout: without this,
    such frames never took the compiled path (replay: 119 us a frame on numpy), and a
    read-only array would be a new type, compiled in the middle of a stream."""
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return np.array(array, order="C")
