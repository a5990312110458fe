"""Stoker's tooling around the job (not the trainer-side reader, which is the ``stoker`` package).

* :mod:`stoker_tools.demo`: what ``./stoker demo`` runs once its set-up is done.
"""
