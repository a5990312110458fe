"""Demo and bench tooling around the Stoker job and reader, kept out of the trainer-side library
``stoker``; ``import stoker`` never imports this package.

* :mod:`stoker_tools.demo`: what ``./stoker demo`` runs once its set-up is done (the local S3
  server, the job, the simulated trainer).
* :mod:`stoker_tools.job`: the job's command lines (the embedded run and ``flink run``), which
  the demo, the benches and the tests start it with.
* :mod:`stoker_tools.simulate`: the simulated trainer (``python -m stoker_tools.simulate``, also
  the ``stoker-simulate`` command) that the demo, the benches and the cluster tests run.
* :mod:`stoker_tools.flink_rest`: the small Flink REST client it reports the job's state with.
"""
