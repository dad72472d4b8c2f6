"""PyTorch Lightning: a train dataloader whose state is that of the last batch the model trained on.

Lightning saves a stateful train dataloader's ``state_dict()`` in its checkpoints and restores it
on ``trainer.fit(ckpt_path=...)``, but its fetcher pulls one batch ahead of training when the
loader has no ``__len__``, so the state of the batches a ``Loader`` delivered would skip one batch
on resume (a plain ``Loader`` refuses that call, see ``Loader.state_dict``). ``TrainLoader`` keeps
the state as of each batch it delivered that training has not started yet; the ``TrainedBatches``
callback marks each batch ``training_step`` receives (``on_train_batch_start``), and
``state_dict()`` is the state as of the last marked batch::

    def train_dataloader(self):
        return loaderx.lightning.TrainLoader(loader)

    trainer = L.Trainer(callbacks=[loaderx.lightning.TrainedBatches(), ModelCheckpoint(...)])

Memory: one state (a few hundred bytes) per batch fetched ahead, at most ``ahead + 1``. Time: one
``Loader.state_dict()`` per batch (about 25-50 us on the project's 2-core machine).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from lightning.pytorch import Callback

from .errors import InvalidInputError

__all__ = ["TrainLoader", "TrainedBatches"]


class TrainLoader:
    """Iterates ``loader``; ``state_dict()`` counts the batches training started on, not those
    fetched ahead. More than ``ahead`` batches fetched beyond training raise ``InvalidInputError``
    (Lightning fetches one; a missing ``TrainedBatches`` callback is caught there)."""

    def __init__(self, loader: Any, ahead: int = 4) -> None:
        if ahead < 1:
            raise InvalidInputError(f"invalid argument: ahead must be at least 1, got {ahead}")
        self.loader = loader
        self.ahead = ahead
        # states[0]: as of the last batch training started on (or of the start); states[k]: as of
        # the k-th batch delivered after it.
        self._states: deque[dict] = deque()
        self._marked = False

    def __iter__(self) -> TrainLoader:
        if len(self._states) > 1:
            # A new iteration drops the batches fetched ahead: rewind so that none is skipped.
            self.loader.load_state_dict(self._states[0])
        self._states.clear()
        return self

    def __next__(self) -> Any:
        if not self._states:
            self._states.append(self.loader.state_dict())
        if len(self._states) > self.ahead:
            raise InvalidInputError(
                f"invalid argument: {len(self._states) - 1} batches fetched ahead of training "
                f"(ahead={self.ahead}); is loaderx.lightning.TrainedBatches() in Trainer(callbacks=...)?"
            )
        batch = next(self.loader)
        self._states.append(self.loader.state_dict())
        return batch

    def trained(self) -> None:
        """Marks the oldest batch fetched ahead as the one training now starts on."""
        if len(self._states) < 2:
            raise InvalidInputError("invalid argument: a batch marked as trained that this loader never delivered")
        self._states.popleft()
        self._marked = True

    def state_dict(self) -> dict:
        if not self._states:
            return self.loader.state_dict()
        if len(self._states) > 1 and not self._marked:
            raise InvalidInputError(
                "invalid argument: no batch of this TrainLoader was marked as trained; add "
                "loaderx.lightning.TrainedBatches() to Trainer(callbacks=...)"
            )
        return self._states[0]

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)
        self._states.clear()


class TrainedBatches(Callback):
    """Tells every ``TrainLoader`` among the trainer's train dataloaders that ``training_step``
    received its next batch."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        for loader in _flat(trainer.train_dataloader):
            if isinstance(loader, TrainLoader):
                loader.trained()


def _flat(iterables: Any) -> list:
    if isinstance(iterables, dict):
        return [x for v in iterables.values() for x in _flat(v)]
    if isinstance(iterables, (list, tuple)):
        return [x for v in iterables for x in _flat(v)]
    return [iterables]
