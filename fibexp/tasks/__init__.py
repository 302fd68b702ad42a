"""Tasks: what a run trains on and how it is scored, one folder each: `config.py` (its `task.*`
keys and what they ask of the rest of the config, no torch) and `task.py` (data, loss and
evaluation). `registry` names them once; `config` and `task` are what every task extends,
`synthetic` what the generated tasks share."""
