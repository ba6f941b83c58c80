"""Optional capabilities as declared flags, checked when a provider's class is defined.

A provider says what it can do with a class attribute (`compiles = True`, `pools = True`,
`batched = True`) and implements the methods that go with it. turnout reads the flag, never
whether a method was overridden; this check keeps the two in step, so a forgotten method or
flag fails at class definition with its name instead of at run time.
"""

from __future__ import annotations

__all__ = ["check_flag"]


def check_flag(cls: type, base: type, flag: str, methods: tuple[str, ...]) -> None:
    """Raise TypeError when `cls` sets `flag` but overrides none of `methods` (relative to
    `base`), or overrides one of them without setting `flag`."""
    declared = bool(getattr(cls, flag))
    overridden = [m for m in methods if getattr(cls, m) is not getattr(base, m)]
    what = " or ".join(methods)
    if declared and not overridden:
        raise TypeError(f"{cls.__qualname__} declares {flag} = True but does not implement {what}")
    if overridden and not declared:
        raise TypeError(
            f"{cls.__qualname__} implements {overridden[0]} but does not declare {flag} = True"
        )
