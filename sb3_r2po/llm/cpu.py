"""CPU tuning of the embedded model: llama.cpp's thread count, its OpenMP threads' spinning, its CPU buffer types, and
the free memory it needs.

**Threads.** By default the thread count is chosen before every call from the CPUs that are free at that moment
(:func:`adaptive_threads`), and llama.cpp's OpenMP threads spin only briefly at barriers (:func:`set_spin_count`):
both keep generation from collapsing when other processes share the cores. llama.cpp builds with AMX kernels get
their "extra buffer types" turned off (they crashed on the AMX machine this was tested on;
:func:`llama_build_has_amx`, :func:`model_params_override`). See the embedded CPU model page of the documentation.

Nothing here imports ``llama_cpp`` at module level.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any


def available_memory() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes; ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_PARAMS_LOCK = threading.Lock()


def llama_system_info() -> str:
    """The instruction sets and features the installed llama.cpp uses on this CPU (``llama_print_system_info``, e.g.
    ``CPU : SSE3 = 1 | ... | AVX512 = 1 | AMX_INT8 = 1 | ...``); empty where the build cannot say."""
    import llama_cpp

    try:
        return llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    except Exception:  # an older or unusual build
        return ""


def llama_build_has_amx() -> bool:
    """Whether the installed llama.cpp was compiled with AMX kernels (``AMX_INT8 = 1`` in its system info; a build
    that cannot say counts as without)."""
    return "AMX_INT8 = 1" in llama_system_info()


@contextlib.contextmanager
def model_params_override(**fields: Any) -> Iterator[None]:
    """
    Make ``llama_cpp.Llama`` start from model parameters with ``fields`` changed (``Llama`` exposes only
    some of them as arguments). Fields this llama.cpp build lacks are ignored.
    """
    import llama_cpp.llama_cpp as low

    with _PARAMS_LOCK:
        original = low.llama_model_default_params

        def patched() -> Any:
            params = original()
            for name, value in fields.items():
                if any(f[0] == name for f in type(params)._fields_):
                    setattr(params, name, value)
            return params

        low.llama_model_default_params = patched
        try:
            yield
        finally:
            low.llama_model_default_params = original


def default_threads() -> int:
    """The CPUs this process may run on (its affinity mask; every CPU where that cannot be read), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def busy_cpus(samples: int = 5, interval: float = 0.01) -> int | None:
    """
    How many other tasks are running right now: the smallest count of runnable tasks in ``/proc/loadavg``
    over a few samples, less this process's own thread. ``None`` where ``/proc/loadavg`` is missing.
    """
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as fh:
                counts.append(int(fh.read().split()[3].split("/")[0]))
        except (OSError, ValueError, IndexError):
            return None
        if i + 1 < samples:
            time.sleep(interval)
    return max(0, min(counts) - 1)


def adaptive_threads(max_threads: int) -> int:
    """
    Threads for the next call: ``max_threads`` on an idle machine, one fewer for each other running task,
    at least one. llama.cpp's threads meet at hundreds of barriers per token, so when the cores are
    oversubscribed every barrier waits for a descheduled thread, and fewer threads generate faster (the thread
    measurements on the embedded CPU model page of the documentation).
    """
    busy = busy_cpus()
    if busy is None:
        return max_threads
    return max(1, min(max_threads, default_threads() - busy))


def set_spin_count(spin_count: int | None) -> None:
    """
    Set ``GOMP_SPINCOUNT`` to ``spin_count`` before ``llama_cpp`` is first imported, unless the user set
    ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` (or ``spin_count`` is ``None``). No effect once ``llama_cpp`` was
    imported: libgomp reads it once, when ``llama_cpp`` loads it.
    """
    if spin_count is not None and "llama_cpp" not in sys.modules:
        # llama.cpp's OpenMP threads spin at every barrier; when another process shares the cores, a long
        # spin slows generation several-fold. An explicit setting of the user wins.
        if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
            os.environ["GOMP_SPINCOUNT"] = str(int(spin_count))


def set_threads(llm: Any, threads: int) -> None:
    """Make a loaded ``llama_cpp.Llama`` use ``threads`` threads for generation and prompt processing."""
    import llama_cpp

    llama_cpp.llama_set_n_threads(llm.ctx, threads, threads)
