"""The agent's stop: SIGUSR1 (the HyperPod elastic agent's graceful stop) and SIGTERM save at
the next step boundary and exit; where that cannot happen within the agent's stop timeout, a
watchdog ends the process without a save, saying why, before the agent's SIGKILL.

Beside train.py in the image, which imports it as a sibling (`from agent_stop import ...`).
"""

from __future__ import annotations

import os
import signal
import threading

from log_format import NO_SAVE_STOP_LINE

# What the stop watchdog keeps of the agent's stop timeout to write its line and exit.
STOP_MARGIN_S = 5


class StopRequest:
    """SIGUSR1 and SIGTERM: save at the next step boundary, then exit 128 + the signal.

    The HyperPod agent (hyperpod-elastic-agent 1.1.3) stops workers with SIGUSR1 when the
    operator's /stop asks for a graceful stop (PLRHyperPodElasticAgent._stop_workers), else
    with its --shutdown-signal (the job passes SIGTERM), and sends SIGKILL --shutdown-timeout
    seconds later (or the /stop request's own timeout). A preemption sends SIGTERM too.

    Python runs a signal's handler only between bytecodes of the main thread, which may be
    waiting inside a collective for a peer that is gone. So a thread watches the signals'
    wakeup fd (written at once, whatever the main thread is doing) and, if the stop has not
    printed its last line `timeout_s` after the signal, prints why and exits itself before
    the agent's SIGKILL.
    """

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self, timeout_s: float, log_line):
        self.signum: int | None = None
        self.saved = 0  # the last checkpoint's step, for the watchdog's line
        self.reported = False  # the stop's last line is out: the watchdog only ends the process
        self._log = log_line
        self._closed = threading.Event()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._handlers = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        self._wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._watchdog = threading.Thread(target=self._watch, args=(max(1.0, timeout_s - STOP_MARGIN_S),), daemon=True)
        self._watchdog.start()

    def _handle(self, signum, frame):
        self.signum = self.signum or signum

    def _watch(self, timeout_s: float):
        signum = None
        while signum is None:
            try:
                data = os.read(self._read, 64)
            except OSError:
                return
            if not data:  # closed: training is over
                return
            # Python writes the number of every signal it handles (SIGINT too); ours only.
            signum = next((b for b in data if b in self.SIGNALS), None)
        if self._closed.wait(timeout_s):
            return
        if not self.reported:
            self._log(NO_SAVE_STOP_LINE.format(
                signal=signal.Signals(signum).name,
                why=f"no step boundary within {timeout_s:.0f}s of the signal (a peer gone, or a collective hung)",
                saved=self.saved,
            ))
        os._exit(128 + signum)

    def close(self):
        """Restore the handlers and end the watchdog (a run inside a test's process)."""
        signal.set_wakeup_fd(self._wakeup)
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._closed.set()
        os.close(self._write)
        self._watchdog.join()
        os.close(self._read)
