"""Progress of the harness's long phases (``moe-select run``, ``run --nproc``).

Each phase (weights, forward, reference; the ranks of ``--nproc``) is followed by one line saying what it
did and how long it took, printed by its caller; while it runs, a :mod:`tqdm` bar counts its steps
(experts built, calls made, ranks finished) on stderr. The bar appears only when stderr is a terminal
(tqdm's ``disable=None``: never in a pipe, a log file or a test's captured output, so ``--json`` and logs
stay clean) and only once the phase has run for :data:`DELAY_S` seconds (short phases draw nothing).
"""
from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

#: A phase draws its bar only after running this long (seconds).
DELAY_S = 1.0
#: The bar is redrawn at most this often (seconds).
REDRAW_S = 0.5


class Phase:
    """One phase: a context manager whose :meth:`advance` moves a tqdm bar of ``total`` steps of ``unit``
    (``expert``, ``call``, ``rank``) named ``name``, drawn on ``file`` (default: stderr) when ``bar`` is
    True, never when False, and when ``file`` is a terminal when None (the default). After the block,
    :attr:`seconds` is the phase's wall time."""

    def __init__(self, name: str, total: int, unit: str, *, bar: bool | None = None, file: TextIO | None = None) -> None:
        self.name, self.total, self.unit = name, total, unit
        self.bar_on, self.file = bar, file
        self.seconds = 0.0
        self._t0 = 0.0
        self._bar: Any = None

    def __enter__(self) -> "Phase":
        from tqdm import tqdm

        out = self.file or sys.stderr
        on = _isatty(out) if self.bar_on is None else self.bar_on  # decided here: tqdm's disable=None would check again
        self._bar = tqdm(total=self.total, desc=self.name, unit=self.unit, file=out, disable=not on, delay=DELAY_S,
                         leave=False, dynamic_ncols=True, mininterval=REDRAW_S)
        self._t0 = time.perf_counter()
        return self

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` more steps done (called by the phase's loop: one expert, one call, one rank)."""
        if self._bar is not None:
            self._bar.update(steps)

    def __call__(self, steps: int = 1) -> None:
        """Same as :meth:`advance`: a phase can be passed where a ``progress(steps)`` callback is taken."""
        self.advance(steps)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.seconds = time.perf_counter() - self._t0
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _isatty(f: Any) -> bool:
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False
