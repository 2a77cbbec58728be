"""Helpers for the tests that press Ctrl-C on a child process."""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """``preexec_fn`` for a child that must see Ctrl-C as a terminal delivers it: SIGINT at its
    default disposition. A shell that starts a command in the background (``cmd &``, ``nohup``)
    without job control sets SIGINT to ignored, the child inherits that, and Python then never
    installs its KeyboardInterrupt handler, so the interrupt tests would fail (or wait for the
    whole run) only because of how the suite was launched."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
