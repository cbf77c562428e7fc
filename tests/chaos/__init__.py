"""The campaign: a seeded mix of faults over a workload on every transport, one row each.

``python -m tests.chaos`` (``nox -s chaos``) runs it for about ten minutes; ``test_chaos.py``
runs a small seeded one in the normal suite. See docs/guides/reliability.md.
"""
