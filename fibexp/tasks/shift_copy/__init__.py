"""task=shift_copy: paper A's mechanism probe, the marked shift-copy."""
