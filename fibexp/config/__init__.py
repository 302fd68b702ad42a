"""Compose and validate a run's config, no torch: typed schemas (schema), the rules the types do
not carry (rules), what makes runs the same (identity), a sweep's cells (cells) and one-line
messages for composition errors (messages)."""
