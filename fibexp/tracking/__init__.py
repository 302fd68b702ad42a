"""Where results go: the MLflow store (store), the outage journal in front of it (journal), runs' data as MLflow dataset inputs (datasets)."""
