"""Plan and execute: flat step lists compiled into straight-line functions."""

from turnout.engine.executor.plan import Plan, RunTerminated, Step

__all__ = ["Plan", "RunTerminated", "Step"]
