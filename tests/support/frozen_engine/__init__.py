"""A frozen copy of the round driver (engine/federation.py, engine/fedbuff.py) as it was before the schedules
were split out of it: tests/engine/test_schedules.py runs it next to the engine, and the metrics must be equal.

Only the two driver modules are frozen (they import each other here); worker, pool, system, methods come from
raytune_fl. Do not edit these copies: they are the reference behaviour.
"""
