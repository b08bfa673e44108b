"""Scaffolding for the chapters' experiments: readers need not study it.

The model library (``attention``, ``blocks``, ``positions``, ``model``, …) is what the book
teaches; the code here exists so that a chapter can measure what that library does: small models
that differ in one respect, synthetic tasks, surgery on a stack of blocks, profilers, and the
schematic figures drawn for one chapter. One module per chapter (``ch02`` … ``ch08``), each opening
with what its chapter uses it for, and one shared module, :mod:`~tinyformer.experiments.toy`
(synthetic token tasks, a next-token loss and the training loop of the toy models).

The model library never imports this package; this package imports the model library and the
drawing primitives of :mod:`tinyformer.viz`.
"""
