"""Announcements heard on many devices at once: ``channels`` (subscriptions, order,
priority), ``shared_jobs`` (one synthesis for every subscriber), ``bus`` (in process or
Redis across instances), ``announcements`` (what is published, pure), ``timeline``
(when it is heard, pure) and ``clock`` (the shared clock it is timed on).

May import ``synthesis`` and below, never a session or a transport.
"""
