"""fibexp: reproduce and compare static sparse token mixing (Fibonacci-spaced attention, hypercube wiring).

`import fibexp` stays light (no torch, Lightning or MLflow); `fibexp.load_run` imports them on
first use."""

__all__ = ["load_run"]


def __getattr__(name: str):
    if name == "load_run":
        from fibexp.deploy.restore import load_run

        return load_run
    raise AttributeError(f"module 'fibexp' has no attribute {name!r}")
