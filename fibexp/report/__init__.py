"""`fibexp-report`'s work, no torch: runs from MLflow and their comparable groups (runs), the
papers' numbers (published), how a claim is judged (claims), the judges of each paper (judges_a,
judges_b) and the ledger of claims (ledger), the tables (tables) and their rendering (render)."""
