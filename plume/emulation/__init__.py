"""Emulation: real kernel network stacks in two network namespaces, joined by a user-space
link with Mahimahi's semantics (delivery opportunities from a trace, one-way delay, droptail
queue, random loss). Needs CAP_NET_ADMIN; see ``netns.can_emulate``."""

from plume.emulation.emulator import Emulator
from plume.emulation.link import LinkSpec, Schedule
from plume.emulation.netns import EmulationUnavailable, can_emulate

__all__ = ["EmulationUnavailable", "Emulator", "LinkSpec", "Schedule", "can_emulate"]
