"""Plan and execute: flat step lists compiled into straight-line functions."""

from .plan import Plan, RunTerminated, Step

__all__ = ["Plan", "RunTerminated", "Step"]
