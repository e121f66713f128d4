"""The one base of the package's errors: `except RaytuneFLError` catches whatever raytune-fl itself raises.

Every error class of the package derives from it and keeps its standard base too (ConfigError is a ValueError,
DownloadError an OSError, MethodCheckError an AssertionError), so that a caller catching those still catches them.
Not derived from it: warnings (EngineNotice, a UserWarning) and a study's interruption (StudyInterrupted, a
KeyboardInterrupt, which `except Exception` must not swallow). Standard library only: the lowest layer imports it.
"""

from __future__ import annotations

__all__ = ["RaytuneFLError"]


class RaytuneFLError(Exception):
    """An error raised by raytune-fl: a configuration, a plugin, a data set, the engine, a tracking write."""
