"""The demo zoo: small seeded torch models for ``edgeconv demo``, tests and benchmarks.

Not part of a port: nothing under ``converter`` but ``edgeconv demo`` imports it.
"""
