"""Synthesis engines behind one seam (``base``): Kokoro, Piper and Hibari, registered in
``registry``; ``voices`` (discovery and routing by language) and ``voicepacks`` (Kokoro's
voice files); the graph cuts and rewrites that make them stream (see docs/engines.md).

May import ``host``, ``native``, ``g2p``, ``sound``, ``text`` and the leaves.
"""
