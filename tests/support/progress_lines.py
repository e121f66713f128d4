"""What the console prints for tiny_space's searched variant `full` (2 trials of 2 rounds)."""

from __future__ import annotations

import re

PER_ROUND = re.compile(r"^\[full\] trial \d/2 round \d/2 val_acc=", re.M)


ENDED = re.compile(r"^\[full\] trial (\d)/2 (finished|stopped early by ASHA at round 1): val_acc=", re.M)
