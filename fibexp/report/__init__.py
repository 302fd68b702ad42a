"""`fibexp-report`'s work, no torch: runs from MLflow and their comparable groups (runs), the
papers' numbers and every bar with its source (published), what a verdict is (claims), the seed
rule (seeds), which runs a claim reads (cells), the judges by paper section (judges/), the ledger
of claims (ledger), the tables (tables) and their rendering (render)."""
