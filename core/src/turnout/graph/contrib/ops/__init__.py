"""One module per group of contrib ops; each calls `turnout.graph.contrib.define` for its ops.

Every module in this package is imported when `turnout.graph.contrib` is.
"""
