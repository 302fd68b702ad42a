"""Benchmarks of the mixers: a measuring harness, one attention layer, and the whole model."""
