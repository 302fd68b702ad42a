"""task=kv_retrieval: key-value retrieval at a distance, paper A's probe as its text describes it."""
