"""The one inference thread (``inference``: earliest deadline first, memory budget, idle
unload of models), the unit of work it runs (``jobs``) and the replay of repeated short
texts (``phrase_cache``).

May import ``engines`` and below.
"""
