"""Faults as a feature: a Redis fault proxy, process and file faults, and a history checker.

See docs/guides/testing-under-faults.md.
"""

__all__: list[str] = []
