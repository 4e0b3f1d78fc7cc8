"""The truth loop: a record of a real run (torch's memory stats or snapshot, a trainer's or engine's memory log,
nvidia-smi) read into a Reading, compared term by term with zeroplan's estimate of the same run, and fitted into
a Calibration (allocator overhead, CUDA context, a fixed residual) that estimate, advise and check apply.

Floor 3: it reads memory/'s estimate and overheads; nothing here imports torch (a snapshot pickle is read by a
restricted unpickler that builds plain containers only). Formats and their sources: docs/calibrate.md.
"""
