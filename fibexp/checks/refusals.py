"""Hydra's and OmegaConf's errors, met while a check reads the config, as the one-line Refusal."""
from __future__ import annotations

import functools
import sys

from hydra.errors import InstantiationException
from omegaconf.errors import OmegaConfBaseException

from fibexp.config import messages
from fibexp.errors import Refusal


def refusals(check):
    """Run `check`, turning Hydra's and OmegaConf's errors into the one-line Refusal."""
    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except InstantiationException as e:
            raise Refusal.of(e.__cause__ or e) from None
        except OmegaConfBaseException as e:
            raise messages.omegaconf_refusal(e, sys.argv[1:]) from None
        except ValueError as e:
            raise Refusal.of(e) from None
    return checked
