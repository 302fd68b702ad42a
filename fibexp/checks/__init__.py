"""Every check that runs before a run exists, no torch until the model half: the passes the entry
points run (preflight), every key's range and the cross-key rules (rules), the composed config's
values (values), this machine (machine, memory), the folders, store and checkpoint file a run uses
(outside), the model built on the meta device and the checkpoint compared with it (meta_model), and
what they learned, handed on to the job (checked). Hydra's and OmegaConf's errors become one
refusal (messages); the Hydra callback that runs the checks is an adapter (callback)."""
