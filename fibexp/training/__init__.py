"""Train one run: take its checked inputs (inputs), open its MLflow run, build the Trainer (run);
the LightningModule (lit); what a run says (logs);
fault injection for rehearsals (faults). A trained run back as a model is fibexp.deploy.restore."""
