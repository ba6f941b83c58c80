"""turnout-testbed: what turnout's tests and benchmarks run on, kept out of the runtime wheel.

- `zoo`: seeded model builders (an MLP, a BERT-like encoder, a ResNet18-like CNN, op chains);
- `apps`: models shaped like the small models applications ship (OCR, VAD, detectors, ...);
- `fake_device`: a test-only provider on a fake device, so partitioning, copies and IO binding
  are tested on any machine.

The old paths `turnout.models.zoo`, `turnout.models.apps` and `turnout.fake_device` import these
modules while this package is installed.
"""
