"""Hydra's and OmegaConf's errors, met while a check reads the config, as the one-line Refusal."""
from __future__ import annotations

import functools
import sys

from hydra.errors import InstantiationException
from omegaconf.errors import OmegaConfBaseException

from fibexp.checks import messages


def refusals(check):
    """Run `check`, turning Hydra's and OmegaConf's errors into the one-line Refusal."""
    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except InstantiationException as e:
            raise messages.instantiation_refusal(e) from None
        except OmegaConfBaseException as e:
            raise messages.omegaconf_refusal(e, sys.argv[1:]) from None
    return checked
