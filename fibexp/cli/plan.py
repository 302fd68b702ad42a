"""`fibexp-plan`: what a sweep will run, which claims it can judge and what it costs, in seconds,
before anything is trained (fibexp.sweep.plan). Takes the arguments of `fibexp-train -m`:

    fibexp-plan --config-dir sweeps --config-name reproduce scale=paper
    fibexp-plan --config-dir sweeps --config-name reproduce scale=cpu -v      # every cell
    fibexp-plan ... --gpu a100 --mfu 0.4                                        # another price
    fibexp-plan ... --seeds-for-power 0.8     # the seed=... override giving every ranking claim 80% power

Exit 2 with one line `fibexp-plan: error: ...` for a cell the sweep would refuse, or a sweep
that cannot judge a claim it declares it serves (--force: print the plan and exit 0 anyway).
"""
from __future__ import annotations

import argparse
import sys
import time

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from fibexp.checks import messages
from fibexp.errors import Refusal, first_line
from fibexp.model import cost
from fibexp.sweep import cells


def calibrate(cfg) -> float | None:
    """A CPU cell's training step timed here (imports torch: only when a CPU cell needs it)."""
    from fibexp.bench.step import step_ms

    return step_ms(cfg)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fibexp-plan", description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for fibexp-train -m")
    p.add_argument("--config-dir", "-cd", default=None, help="a directory of sweep configs (e.g. sweeps)")
    p.add_argument("--config-name", "-cn", default="train")
    p.add_argument("-m", "--multirun", action="store_true", help="accepted for fibexp-train's arguments; the plan is always of a multirun")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per cell")
    p.add_argument("--gpu", default=cost.DEFAULT_GPU, help=f"GPU cells are priced at its peak: {', '.join(cost.GPUS)}")
    p.add_argument("--mfu", type=float, default=cost.DEFAULT_MFU, help="model FLOPs utilisation assumed on that GPU")
    p.add_argument("--force", action="store_true", help="a sweep that cannot judge a claim it serves: warn, exit 0")
    p.add_argument("--seeds-for-power", type=float, default=None, metavar="P",
                   help="the power each ranking claim is planned for (default 0.8); given, the last line printed is "
                        "the seed=... override that reaches it for every served ranking claim")
    a = p.parse_args(argv)
    if a.seeds_for_power is not None and not 0 < a.seeds_for_power < 1:
        return _refuse(str(Refusal("--seeds-for-power", f"{a.seeds_for_power:g}", "a power strictly between 0 and 1")))
    try:
        cost.check_pricing(a.gpu, a.mfu)
    except Refusal as e:
        return _refuse(first_line(e))
    from fibexp.sweep import plan  # it reads the tracking store (MLflow): not before the command line is read

    start = time.perf_counter()
    try:
        master, loader = cells.sweep_config(a.config_name, a.overrides, a.config_dir)
        result = plan.plan(master, loader, calibrate, a.gpu, a.mfu,
                           0.8 if a.seeds_for_power is None else a.seeds_for_power)
    except Refusal as e:
        return _refuse(first_line(e))
    except (HydraException, OmegaConfBaseException) as e:
        refusal = messages.hydra_refusal(e, a.overrides, a.config_dir)
        if refusal is None:
            raise
        return _refuse(str(refusal))
    print("\n".join(result.lines(a.verbose)))
    print(f"planned in {time.perf_counter() - start:.1f} s")
    if a.seeds_for_power is not None:
        from fibexp.report.power import seeds_override

        override = seeds_override(result.powers)
        print(override or f"# every served ranking claim reaches {a.seeds_for_power:.0%} power with the grid's seeds")
    if (why := result.refusal()) is not None:
        if not a.force:
            return _refuse(why + " (--force, or make reproduce FORCE=1: run it anyway)")
        print(f"fibexp-plan: warning: {why}", file=sys.stderr)
    return 0


def _refuse(line: str) -> int:
    print(f"fibexp-plan: error: {line}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
