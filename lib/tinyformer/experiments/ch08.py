"""Chapter 8 (the KV cache): counting the tensor operations a decoding step runs.

:func:`count_ops` counts, by name, the operations PyTorch dispatches during one call; the chapter
uses it to show that a cached decoding step runs the same number of operations whatever the
context's length, each paying a fixed overhead that dominates small models on a CPU.
"""

from __future__ import annotations

import collections


def count_ops(fn) -> collections.Counter:
    """The tensor operations one call of ``fn()`` runs, counted by name
    (``aten.mm``, ``aten.add``, …) at the level where PyTorch dispatches
    them to kernels: each costs a fixed overhead whatever its size. Views
    and in-place writes count too; Python code between them does not."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with _Counter() as counter:
        fn()
    return counter.ops


__all__ = ["count_ops"]
