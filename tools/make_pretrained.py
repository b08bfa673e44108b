"""Regenerate the library's trained English GPT (tinyformer/pretrained/english-gpt.pt and its record).

Chapter 6's main run, on the CPU under the pinned numerics (source lib/tinyformer/numerics.env
first, as `make execute` does), about two minutes on two cores:

    set -a; . lib/tinyformer/numerics.env; set +a; .venv/bin/python tools/make_pretrained.py
"""

import os
import platform

from tinyformer.pretrained import save_english_gpt, train_english_gpt

if __name__ == "__main__":
    model, history = train_english_gpt()
    cpu = platform.processor() or platform.machine()
    rec = save_english_gpt(model, history, note=f"tools/make_pretrained.py on {cpu}, "
                           f"{os.environ.get('TINYFORMER_NUM_THREADS', '?')} threads, pinned numerics")
    print(f"validation loss {rec['val_loss']:.4f}; {rec['bytes']:,} bytes; sha256 {rec['sha256']}")
