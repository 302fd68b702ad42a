"""Registers fibexp's structured-config schemas whenever Hydra starts.

`conf/` composes against typed schemas (`train_schema`, `model/model_schema`, ...) that live in
Hydra's ConfigStore, not on disk. Hydra imports every module under the `hydra_plugins` namespace
when it initialises (`@hydra.main`, and the Compose API's `initialize_config_dir`), so
registering here makes `compose("train", ...)` work in a notebook that never imported fibexp."""
from fibexp.config.schema import register

register()
