"""turnout-example: the ExampleExecutionProvider for turnout.

The provider is a few small parts, named as in every turnout provider:

- `factory.py`           ExampleFactory: probe() (can it run here?) and create(options)
- `provider.py`          ExampleProvider: which nodes it claims, and compiling fused groups
- `allocator.py`         ExampleAllocator: buffers on the provider's device
- `data_transfer.py`     ExampleDataTransfer: copies between host and device
- `kernels/`             op-by-op kernels (one module per op family), the fused-chain compiler
- `expected_failures.py` reviewed conformance failures (case -> reason); empty here
- `plugin.py`            the hook turnout calls to discover the factory (see pyproject.toml)
"""

__version__ = "0.1.0"

PROVIDER_NAME = "ExampleExecutionProvider"
"""The canonical name users pass in `providers=[...]`."""

ALIAS = "example"
"""The short name, also accepted in `providers=[...]` and by the CLI."""

__all__ = ["ALIAS", "PROVIDER_NAME", "__version__"]
