# tinyformer: every target sets itself up on a fresh machine (a .venv in this folder).
# make book · make test · make execute · make student · make grade DIR=folder · make bench · make reference · make pdf

PYTHON ?= python3
# pip index for torch alone, e.g. https://download.pytorch.org/whl/cpu for the CPU build on Linux
TORCH_INDEX ?=
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DIR    ?= student
# pytest-xdist workers for make pytest: one per core
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
# where make grade writes grades.csv, grades.json and grades.md; GRADE_FLAGS adds options (--jobs 2 …)
OUT    ?= grades
GRADE_FLAGS ?=
BOOK_NOTEBOOKS := $(sort $(wildcard book/[0-9][0-9]-*.ipynb))

.PHONY: install book test lint workflows pytest nbval sync claims glossary build html execute student grade bench clean browser readers reference pdf

install: $(STAMP)

# torch first, by itself: `torch==2.13.0` is a CPU wheel on the course machines; letting another
# package pull torch in could fetch a multi-gigabyte CUDA build instead.
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$$(grep -E '^torch==' requirements.txt)"
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: $(STAMP) lint workflows pytest nbval sync claims glossary readers build html browser
	@echo "make test: all checks passed"

lint: $(STAMP)
	$(VENV)/bin/ruff check lib tests tools benchmarks _ext reference

# the GitHub Actions workflows: actionlint (with shellcheck), zizmor offline, actions pinned by commit
workflows: $(STAMP)
	$(PY) tools/lint_workflows.py

# on every core (pytest-xdist; each worker runs one thread); the notebooks nbval compares run one at a
# time, with the pinned numerics' two threads
pytest: $(STAMP)
	$(VENV)/bin/pytest -n $(JOBS) --durations=15 tests

nbval: $(STAMP)
	$(VENV)/bin/pytest --nbval $(BOOK_NOTEBOOKS) --nbval-sanitize-with tools/nbval_sanitize.cfg

sync: $(STAMP)
	$(PY) tools/nb.py check-sync

# the claims ledger (book/appendix-claims.md) matches the chapters' claim cells, which are well formed
claims: $(STAMP)
	$(PY) tools/claims.py check

# the glossary (book/appendix-glossary.md) matches the terms the chapters define in bold
glossary: $(STAMP)
	$(PY) tools/glossary.py check

# the reader notebooks under notebooks/ are fresh, free of MyST, and number things as the website does
readers: $(STAMP)
	$(PY) tools/nb.py check-readers

build: book

html: $(STAMP)
	$(PY) tools/check_html.py
	$(PY) tools/nb.py check-readers --html _build/html

# the built pages in headless Chromium at desktop and phone widths (Debian's chromium and chromium-driver)
browser: $(STAMP)
	$(PY) tools/browser_check.py

# the book as one PDF, _build/tinyformer.pdf: Jupyter Book's LaTeX builder, then xelatex (latexmk). Not part of
# `make test`: about 1.5 minutes on two cores (Sphinx 50 s, xelatex 40 s). Needs Debian's TeX and fonts (TEX_APT,
# about 390 MB installed); its own build folder (_build/pdf), so that the next `make book` need not read every page again.
TEX_APT := texlive-xetex texlive-latex-extra texlive-fonts-recommended latexmk lmodern fonts-freefont-otf fonts-dejavu-core fonts-symbola
TEX_MISSING = echo "make pdf: $$1 is missing; install Debian's TeX and fonts: apt-get install --no-install-recommends $(TEX_APT)" >&2; exit 1
pdf: $(STAMP)
	@set -- ; for tool in xelatex latexmk makeindex kpsewhich fc-list; do command -v $$tool >/dev/null || { set -- "the command $$tool"; $(TEX_MISSING); }; done; \
	for sty in fncychap.sty tabulary.sty newunicodechar.sty ucharclasses.sty unicode-math.sty pgfplots.sty; do \
	  test -n "$$(kpsewhich $$sty)" || { set -- "the LaTeX package $$sty"; $(TEX_MISSING); }; done; \
	for font in FreeSerif "DejaVu Sans Mono" Symbola "Latin Modern Math"; do \
	  fc-list -q "$$font" || { set -- "the font $$font"; $(TEX_MISSING); }; done
	rm -f _build/tinyformer.pdf
	LATEXOPTS="-interaction=nonstopmode -halt-on-error" $(VENV)/bin/jupyter-book build . --builder pdflatex --path-output _build/pdf -W -n --keep-going
	cp _build/pdf/_build/latex/tinyformer.pdf _build/tinyformer.pdf
	@echo "make pdf: wrote _build/tinyformer.pdf"

execute: $(STAMP)
	$(PY) tools/nb.py execute
	$(PY) tools/claims.py write
	$(PY) tools/gpu_page.py write

student: $(STAMP)
	$(PY) -m tinyformer.student book --out student

grade: $(STAMP)
	$(PY) -m tinyformer.grade "$(DIR)" --out "$(OUT)" $(GRADE_FLAGS)

bench: $(STAMP)
	$(PY) benchmarks/attention_cost.py
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/kv_cache.py
	$(PY) benchmarks/bpe.py
	$(PY) benchmarks/train_english.py
	$(PY) benchmarks/skipgram.py
	$(PY) benchmarks/lora_step.py

# the reference suite (reference/, see the README): the library against the field's own libraries (PEFT's
# LoRA, TransformerLens' hooks) on the same weights. Not part of `make test`: its pins
# (reference/requirements.txt: transformers, …) live in a venv of their own, torch again first and alone,
# then the library without its dependencies.
REF_VENV  := .venv-reference
REF_PY    := $(REF_VENV)/bin/python
REF_STAMP := $(REF_VENV)/.installed

reference: $(REF_STAMP)
	$(REF_VENV)/bin/pytest reference

$(REF_STAMP): reference/requirements.txt pyproject.toml
	test -x $(REF_PY) || $(PYTHON) -m venv $(REF_VENV)
	$(REF_PY) -m pip install --quiet --upgrade pip
	$(REF_PY) -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$$(grep -E '^torch==' reference/requirements.txt)"
	$(REF_PY) -m pip install --quiet -r reference/requirements.txt
	$(REF_PY) -m pip install --quiet --no-deps -e .
	touch $(REF_STAMP)

clean:
	rm -rf _build student grades
