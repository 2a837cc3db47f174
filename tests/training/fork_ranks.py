"""`python fork_ranks.py`: a launch of SCRIPT on N gloo ranks of this machine per line of stdin,
as `torchrun --standalone --nproc-per-node=N SCRIPT ARGS...` starts them, with the imports paid
once for every launch (runs.py RankServer is its client; serve() says what a line asks).

Each rank is a process of its own with the environment torchrun gives its workers (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and SCRIPT run as
`__main__`; but the ranks are forked from this process after it has imported train.py and what
train.py imports when it runs (torch, transformers' LLaMA, datasets, torch's checkpoint and FSDP
modules): about 4 s of a process on this project's machine, which under torchrun each rank and
the agent paid again at every launch. When a rank fails the others are stopped, as torchrun's
agent stops them, and the launch's exit status is the first failed rank's. Output is the ranks'
own, on the launch's stdout and stderr.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

TRAINING = Path(__file__).resolve().parents[2] / "training"
# torchrun's agent waits this long after its SIGTERM before it kills a worker.
STOP_GRACE_S = 30


def preload() -> None:
    """What a rank of train.py imports before its first step. The environment the imports read
    (OMP_NUM_THREADS, the Hugging Face offline switches) is this process's, for every launch."""
    sys.path.insert(0, str(TRAINING))
    import train  # noqa: F401  (torch, and train.py's siblings)

    import datasets  # noqa: F401
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import transformers.integrations.sdpa_attention  # noqa: F401
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: F401


def _exit_status(stop: SystemExit) -> int:
    return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def _rank(rank: int, world: int, port: int, script: str, args: list[str]) -> None:
    """The forked rank: SCRIPT as __main__ with torchrun's worker environment; never returns."""
    code = 1
    try:
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = _exit_status(stop)
    except BaseException:  # a rank's failure is its traceback on stderr and a non-zero status, as under torchrun
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def launch(world: int, script: str, args: list[str], started: Callable[[list[int]], None]) -> int:
    """Forks the ranks, says their process ids to `started`, waits for them, and returns the first
    failed rank's status (0: none failed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sys.stdout.flush()
    sys.stderr.flush()
    children = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            _rank(rank, world, port, script, args)
        children[pid] = rank
    started(list(children))
    failed = 0
    while children:
        pid, status = os.wait()
        children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code and not failed:
            failed = code if code > 0 else 1
            for other in children:
                os.kill(other, signal.SIGTERM)
            signal.signal(signal.SIGALRM, lambda *_: [os.kill(p, signal.SIGKILL) for p in children])
            signal.alarm(STOP_GRACE_S)
    return failed


def serve() -> int:
    """A launch per request line, {"world", "script", "args", "cwd", "env", "stdout", "stderr"}
    (env: the whole environment of the ranks; stdout and stderr: files, or FIFOs the client
    reads as the ranks write), each forked from this process's imports, one at a time. Answered
    with two lines: {"ranks": [process ids]} once they are forked, {"status": N} once they have
    ended."""
    preload()
    answers = os.fdopen(os.dup(1), "w")

    def say(answer: dict) -> None:
        answers.write(json.dumps(answer) + "\n")
        answers.flush()

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for fd, name in ((1, "stdout"), (2, "stderr")):  # first: a client reading a FIFO waits for it
                    os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                os.chdir(request["cwd"])
                os.environ.clear()
                os.environ.update(request["env"])
                code = launch(request["world"], request["script"], request["args"], lambda ranks: say({"ranks": ranks}))
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        say({"status": os.waitstatus_to_exitcode(status)})
    return 0


if __name__ == "__main__":
    sys.exit(serve())
