"""The image a boot ran, as the boot record and a run's summary both keep it. It lives below boot
and load so that a run's summary names it without importing the boot drivers."""

from __future__ import annotations

from rig.typed import Typed


class BootImage(Typed):
    """The image a boot ran: the container's (compose), the recipe's base (native), or the identity
    rig read from a server it did not start (attach)."""

    id: str | None = None
    tags: list[str] | None = None
    digests: list[str] | None = None
    labels: dict[str, str] | None = None
    base: str | None = None
    identity: str | None = None
