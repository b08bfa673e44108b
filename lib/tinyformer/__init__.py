"""tinyformer: the small, tested library behind the tinyformer textbook.

Every piece of model code the book shows lives here, once; the chapters import it, display it
with :func:`show_source`, and test the reader's own versions against it (:mod:`tinyformer.checks`).
"""

from tinyformer.setup import check_shape, get_device, glue, measured, seed_everything, show_source
from tinyformer.validation import check_int

__version__ = "0.1.0"
__all__ = ["check_int", "check_shape", "get_device", "glue", "measured", "seed_everything", "show_source",
           "__version__"]
