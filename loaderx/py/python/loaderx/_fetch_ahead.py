"""The guard ``Loader.state_dict()`` runs first: it refuses a caller that is known to fetch ahead.

A loader's state counts every batch it delivered. PyTorch Lightning saves the state of a stateful
train dataloader itself, from its ``CombinedLoader``, while its fetcher holds one batch it pulled
ahead of training (a loader without ``__len__``): that state counts a batch the model never trained
on, and a run resumed from it would skip that batch. Rather than save a state that silently skips
data, ``state_dict()`` called from Lightning's own modules raises and names the adapter that saves
the state as of the last trained batch (``loaderx.lightning.TrainLoader``).
"""

from __future__ import annotations

import sys

from .errors import InvalidInputError

# Modules whose calls to state_dict() come from a trainer that fetches ahead of training.
FETCHING_AHEAD = ("lightning.pytorch.", "pytorch_lightning.")


def caller_module(frame) -> str:
    """The module name of the code that called the function running in ``frame``; ``""`` when no
    Python code called it (a call from native code at the bottom of the stack)."""
    caller = frame.f_back if frame is not None else None
    module = caller.f_globals.get("__name__", "") if caller is not None else ""
    return module if isinstance(module, str) else ""


def refuse_fetching_ahead_caller() -> None:
    """Raises ``InvalidInputError`` when the code that called ``Loader.state_dict()`` (the Python
    frame below this one: the native method has none) belongs to a module of ``FETCHING_AHEAD``."""
    module = caller_module(sys._getframe(0))
    if module.startswith(FETCHING_AHEAD):
        raise InvalidInputError(
            "invalid argument: Lightning asked a loaderx Loader for its state while its fetcher holds "
            f"a batch pulled ahead of training (caller: {module}); that state would skip the batch on "
            "resume. Return loaderx.lightning.TrainLoader(loader) from train_dataloader() and add its "
            "loaderx.lightning.TrainedBatches() callback to the Trainer: it saves the state as of the "
            "last batch training_step received"
        )
