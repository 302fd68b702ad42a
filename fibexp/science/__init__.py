"""Paper A's and paper B's pattern math, pure Python (no torch): what the model wires and the claims count."""
