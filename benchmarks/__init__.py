"""echomq's benchmarks: ``python -m benchmarks NAME`` runs one (benchmarks/README.md).

Each benchmark is the module ``benchmarks.NAME``: its own parser (``main(argv)``) and, for
the published ones, ``readme(doc, source)``, the markdown its results file makes. What
they share:

- :mod:`benchmarks.machine`: the run's facts (machine, load, code measured), and ``log``;
- :mod:`benchmarks.files`: where results go (scratch, or ``--publish``) and the writer;
- :mod:`benchmarks.turns`: the rotation "in turns", and exports of other revisions;
- :mod:`benchmarks.stats`: figures over repetitions; :mod:`benchmarks.tables`: markdown;
- :mod:`benchmarks.ceiling`: redis-benchmark; :mod:`benchmarks.harness`: an adapter run
  through every mode; :mod:`benchmarks.noop`: the no-op queue and its worker process;
- :mod:`benchmarks.report`: benchmarks/README.md's tables from the published files;
- ``adapters/``: one per system (echomq, BullMQ on Node, the Python peers);
  ``apps/``: the worker apps the worker processes serve.
"""
