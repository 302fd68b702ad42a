"""Helpers shared by the unit, e2e and cluster tests (hand-made MLflow runs, local servers)."""
