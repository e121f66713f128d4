"""A command stopped by Ctrl-C or SIGTERM (tune/interrupt.py): what it says, and how it exits.

Every long command (tune, ablate, reproduce) runs inside `guarded(command, argv)`. When it is stopped, it says what
was cut and ends with one line naming the exact command that continues it, then exits 130 (SIGINT) or 143 (SIGTERM).
Inside reproduce, the inner tune and ablate name reproduce's command: it is the one the user typed.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from raytune_fl.cli.common import command_line, console_prog
from raytune_fl.tune import interrupt
from raytune_fl.tune.interrupt import StudyInterrupted

__all__ = ["EXIT_CODES", "StopState", "StudyInterrupted", "guarded", "resume_command", "stopped"]

EXIT_CODES = (130, 143)  # a command stopped by SIGINT, by SIGTERM


def resume_command(command: str, argv: Sequence[str]) -> str:
    """The command line as given, with --resume: what continues a stopped study."""
    if command == "reproduce":
        typed = "raytune-fl reproduce" if console_prog("").startswith("raytune-fl ") else "python scripts/reproduce.py"
    else:
        typed = command_line(command)
    args = list(argv) if "--resume" in argv else [*argv, "--resume"]
    return f"{typed} {shlex.join(args)}"


@contextmanager
def guarded(command: str, argv: Sequence[str] | None) -> Iterator[None]:
    """Signals handled as tune/interrupt.py says for the length of the command; `argv` None: sys.argv's."""
    given = list(sys.argv[1:] if argv is None else argv)
    with interrupt.guarded(resume_command(command, given)):
        yield


@dataclass
class StopState:
    """What a command says if Ctrl-C or SIGTERM stops it now: what would be cut (one line), and whether it has
    written a record that --resume continues. The command keeps it up to date as it goes."""

    cut: str
    resumable: bool = False

    def stopped(self, stop: StudyInterrupted) -> int:
        """`stopped` with what this state says; the exit code."""
        return stopped(stop, self.cut, self.resumable)


def stopped(stop: StudyInterrupted, what: str, resumable: bool) -> int:
    """Says that the command was stopped and how to go on (`what`: what was cut, one line; `resumable`: whether a
    record to resume exists, else nothing was written and the command is simply run again); the exit code."""
    forced = " (forced)" if stop.forced else ""
    print(f"\ninterrupted by {stop.name}{forced}: {what}", file=sys.stderr, flush=True)
    if resumable:
        print(f"resume with: {interrupt.resume_command()}", file=sys.stderr, flush=True)
    else:
        print("nothing was started: run the same command again", file=sys.stderr, flush=True)
    return stop.exit_code
