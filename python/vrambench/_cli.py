"""The ``vrambench`` command of the package: the program's command line, run by the engine."""

import signal
import sys
from typing import Optional, Sequence

from . import _engine


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs a command line (``sys.argv[1:]`` by default) as the vrambench program does: its output
    on stdout and stderr, its exit code returned (2 for a mistake)."""
    if argv is None:
        argv = sys.argv[1:]
        # The process is the program: Ctrl-C and a closed pipe end it as they end the program,
        # rather than waiting for the command to return to Python.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    return _engine.main([str(a) for a in argv])


def console() -> None:
    """The console script's entry point."""
    sys.exit(main())
