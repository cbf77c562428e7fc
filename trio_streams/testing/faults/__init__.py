"""Faults as a feature: a Redis fault proxy, process and file faults, and a history checker.

See docs/guides/testing-under-faults.md.
"""

from .files import (
    FRAME_FIELDS,
    FrameField,
    FrameLocation,
    cut_copies,
    damage_frame_header,
    flip_bit,
    frame_offsets,
    zero_range,
)

__all__: list[str] = [
    "FRAME_FIELDS",
    "FrameField",
    "FrameLocation",
    "cut_copies",
    "damage_frame_header",
    "flip_bit",
    "frame_offsets",
    "zero_range",
]
