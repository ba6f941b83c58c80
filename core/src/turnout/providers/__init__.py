"""Built-in providers. Only the CPU provider lives in core; the others are plugins."""
