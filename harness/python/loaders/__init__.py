"""Loader arms of the end-to-end loader tables, one module per loader family.

Every arm delivers the same batch contract (Dense: ``(256, *item_shape)`` uint8; Ragged: packed
``values``, int32 ``cu_seqlens`` offsets, ``shapes``) for the same index draws (the harness writes
them to ``draws.npy``), times only the delivery (conversion to the contract included), and checks
every timed batch against the source arrays after its timer. The modules are importable so that
loaders which spawn worker processes (grain, litdata's optimize, lance's safe loader) can
import the callables they pickle.
"""
