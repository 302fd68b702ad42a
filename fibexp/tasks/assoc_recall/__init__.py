"""task=assoc_recall: paper B's grouped associative recall."""
