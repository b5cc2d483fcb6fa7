"""One client's speech, sans I/O: ``session`` takes protocol messages and job events and
returns ``effects`` (send, submit, join a channel, close) for a transport to carry out;
``utterance`` is one utterance's state, ``languages`` the languages a request may name;
``word_timing`` turns an engine's timed words into the client's; ``ratelimit`` is the
per-connection message rate.

Imports no transport and no service: ``config``, ``broadcast`` (an announcement's shape),
``synthesis`` (jobs), the engines' seam types, ``sound``, ``text`` and the protocol.
"""
