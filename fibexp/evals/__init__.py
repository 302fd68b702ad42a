"""Evaluations of a trained language model, beside each other: the held-out perplexity protocol,
RULER/LEGO chains, paper A's forward timing and the int8 copy against the float model. The tasks
run them at the end of training; deploy and bench reuse them on a finished run."""
