"""Throughput: FLOPs, collectives, the per-stage step schedule, step time and MFU, batch sweeps."""
