"""Tasks: what a run trains on and how it is scored. `spec` (schemas and checks, no torch) is what
the config layer reads; `registry` maps names to the implementations (`base.Task`)."""
