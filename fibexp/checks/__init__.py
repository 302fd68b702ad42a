"""Every check that runs before a run exists, no torch until the model half: the passes the entry
points run (preflight), the composed config's values (values), this machine (machine, memory),
the folders, store and checkpoint file a run uses (outside), the model built on the meta device
and the checkpoint compared with it (model, checkpoints), and what they learned, handed on to the
job (checked). The Hydra callback that runs them is an adapter (callback)."""
