"""Tools on top of the runtime: the command line, quantization, Ray batch inference, provider
scaffolding, test helpers (`turnout.testing`), benchmark models and the fake device.

Nothing in the runtime layers imports this package.
"""
