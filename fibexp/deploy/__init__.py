"""Everything a trained run becomes: the run back as a model (restore, `fibexp.load_run`), text
generated token by token (decode), an ONNX graph (onnx), a `transformers` folder and its modelling
code (transformers, modeling_fibexp), lm-evaluation-harness scores (lm_eval) and an int8 copy
measured against the float one (int8). Above training: it reads the checkpoints training writes."""
