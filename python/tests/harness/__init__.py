"""The Python tests' shared scaffolding, imported by every tier (``unit``, ``system``, ``model``);
``python/tests`` is on ``sys.path`` (``pythonpath`` in ``python/pyproject.toml``), so tests write
``from harness.batches import make_job``. One module per role:

* :mod:`harness.paths`: the repository, ``../shared/data`` and its datasets and tokenizer.
* :mod:`harness.batches`: batch files and manifests written with pyarrow exactly as the protocol
  (``schema/batch-schema.json``) describes, for the reader's tests.
* :mod:`harness.polling`: waiting for a condition (background threads, REST APIs).
* :mod:`harness.jobs`: the real job on embedded Flink with the tests' defaults
  (:func:`stoker_tools.job.embedded_command`) and generated datasets.
* :mod:`harness.trainers`: the simulated trainer (``stoker_tools.simulate --record``) as a child
  process and what it and the sink leave in a job directory.
* :mod:`harness.cluster`: a standalone Flink cluster (``scripts/cluster.sh``), submissions with
  ``flink run`` (:func:`stoker_tools.job.flink_run_args`) and the uninterrupted reference run.
* :mod:`harness.exactly_once`: the assertions that trainers read every batch once, as the
  reference did, and that no batch file is left.
* :mod:`harness.real_model`: the real-model tier's dataset, tiny transformers models and job
  runs (imports torch and transformers: the model venv only).

Fixtures stay in the ``conftest.py`` files; nothing here is a test.
"""
