"""Train one run: check its inputs, open its MLflow run, build the Trainer (run); the
LightningModule (lit); checkpoints that cannot run code (checkpoints); what a run says (logs);
fault injection for rehearsals (faults). A trained run back as a model is fibexp.deploy.restore."""
