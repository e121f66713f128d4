"""The author's own test of `fedtrim` (my_method.py): `python -m pytest test_my_method.py` from this folder.

`check_method` runs the method as trials do, in this process: two rounds on a tiny synthetic federation, its state
through a trial checkpoint against an uninterrupted run, its clients trained stacked (client_batch) against one at a
time. It raises an AssertionError that says what to fix (docs/how-to/own-method.md#checking-your-method).
"""

from __future__ import annotations

import my_method  # registers fedtrim

from raytune_fl.testing import check_method


def test_fedtrim_at_its_defaults():
    check_method("fedtrim")


def test_fedtrim_without_its_term_and_a_wider_trim():
    check_method(my_method.SPEC, {"lam": 0.0, "trim": 0.3})
