"""What a run's config is, no torch: typed schemas (schema), where its files go (paths), what makes
runs the same (identity) and a command line's grids expanded into cells (overrides). Whether a
config may run is fibexp.checks's answer."""
