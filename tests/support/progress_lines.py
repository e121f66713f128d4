"""What the console prints for tiny_space's searched variant `full` (2 trials of 2 rounds)."""

from __future__ import annotations

import re

PER_ROUND = re.compile(r"^\[full\] trial \d/2 round \d/2 val_acc=", re.M)


# how a trial ended: finished or collapsed (at chance) ran both rounds, ASHA's stop ran one
ENDED = re.compile(
    r"^\[full\] trial (\d)/2 (finished|collapsed \(at chance\)|stopped early by ASHA at round 1): val_acc=", re.M
)
RAN_BOTH_ROUNDS = ("finished", "collapsed (at chance)")
