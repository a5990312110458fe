"""Demo and bench tooling around the Stoker reader, kept out of the trainer-side library ``stoker``.

:mod:`stoker_tools.simulate` is the simulated trainer (``python -m stoker_tools.simulate``, also
the ``stoker-simulate`` command) that ``./stoker demo``, the benches and the cluster tests run;
:mod:`stoker_tools.flink_rest` the small Flink REST client it reports the job's state with.
``import stoker`` never imports this package.
"""
