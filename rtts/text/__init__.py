"""Text before phonemes: units (``split``), language runs (``segment``), normalizers per
language, markup, the lexicon, and where each rewritten character came from (``origins``).

Imports only the leaves (``files``).
"""
