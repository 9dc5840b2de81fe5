"""fairalloc's benchmarks: paper reproductions (docs/benchmarks/papers.md) and solver/formulation benchmarks.

Every module here that defines ``NAME``, ``DESCRIPTION`` and ``run(out, quick=False)`` is a benchmark.
``run`` writes ``<NAME>.csv``, ``<NAME>.png`` and ``<NAME>.md`` (a summary the docs include) into the
folder ``out`` and returns a dict with at least ``name`` and ``files``. Run them with::

    python -m benchmarks                 # list them
    python -m benchmarks NAME [NAME ...] [--quick] [--out benchmarks/out] [--publish]
    python -m benchmarks all --quick     # every benchmark, small sizes

``--publish`` copies each summary, figure and table into ``docs/benchmarks/`` (the pages the docs
show, and the CSV they cite).
Performance claims are ratios measured within one run; nothing here is asserted by the tests.
"""
