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

With ``training_step(self, dataloader_iter)`` Lightning fetches nothing ahead: the step takes its
batches from the iterator, and the callback marks every batch delivered so far as trained when the
step ends (``on_train_batch_end``, before ``ModelCheckpoint`` saves: Lightning runs checkpoint
callbacks last). A step that pulls a batch for the next step ahead of time would count it as
trained; take each step's batches within that step.

Completion order (``ordered=False`` with several workers): each kept state lists the steps
delivered past its low-water step, so a resumed run trains exactly the steps the killed one did
not, in completion order (not in the uninterrupted run's order, which completion order does not
fix). Lightning saves rank 0's state and loads it on every rank, which a completion-order state
with steps ahead refuses on the other ranks (``InvalidInputError``): use ``ordered=True`` with
several ranks.

Memory: one state per batch fetched ahead, at most ``ahead + 1``: a few hundred bytes each for a
plain loader; for a ``first_fit`` packing loader (``Loader.pack``) each also holds the open rows, up
to ``pool x seq_len`` tokens at 2 bytes of hex per token byte (1 MiB for 32 rows of 4,096 int32
tokens, so up to 5 MiB at the default ``ahead=4``). Time: one ``Loader.state_dict()`` per batch
(about 25-50 us on the project's 2-core machine for a plain loader; a first-fit packer's state
also encodes its open rows: 3.4 ms there with 32 rows holding 127k int32 tokens, about 7 ns per
token byte held, against some 70 us to pack an 8 x 4,096 batch, so a Lightning run packing
first-fit at that size spends most of its loader time saving states).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from lightning.pytorch import Callback
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

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

    def trained_all(self) -> None:
        """Marks every batch delivered so far as trained (a ``dataloader_iter`` step took them)."""
        while len(self._states) > 1:
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
    received its next batch (at the step's start), or, for ``training_step(self,
    dataloader_iter)``, that the step trained every batch it took (at the step's end)."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if _takes_iterator(pl_module):
            return
        for loader in _train_loaders(trainer):
            loader.trained()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not _takes_iterator(pl_module):
            return
        for loader in _train_loaders(trainer):
            loader.trained_all()


def _takes_iterator(pl_module: Any) -> bool:
    """Whether ``training_step`` takes ``dataloader_iter`` (Lightning's own test for that form)."""
    return is_param_in_hook_signature(pl_module.training_step, "dataloader_iter", explicit=True)


def _train_loaders(trainer: Any) -> list[TrainLoader]:
    return [x for x in _flat(trainer.train_dataloader) if isinstance(x, TrainLoader)]


def _flat(iterables: Any) -> list:
    if isinstance(iterables, dict):
        return [x for v in iterables.values() for x in _flat(v)]
    if isinstance(iterables, (list, tuple)):
        return [x for v in iterables for x in _flat(v)]
    return [iterables]
