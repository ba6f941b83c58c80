"""The engine: from a loaded graph to results.

Provider selection, partitioning, the execution plan and executor, copies at device boundaries,
memory planning, profiling and the pipeline's stages. Each stage takes plain arguments (an
`EngineOptions` record), never the onnxruntime façade's objects. It imports the graph layer, the
SDK, the optimizer and the built-in CPU provider.
"""
