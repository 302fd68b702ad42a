"""task=count_ones: paper B's reachability task (the number of ones, read at position 0)."""
