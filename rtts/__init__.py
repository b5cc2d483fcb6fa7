"""rtts: real-time text-to-speech over WebSocket for small CPU machines.

The folders are the layers; a module imports only from layers below its own, and no
import closes a circle (``[tool.importlinter]`` in pyproject.toml; tests/unit/test_layers.py):

- ``__main__``: the command line (``rtts serve``, ``say``, ``voices``, ``play``).
- ``play/``: the headless player, a client of the server (protocol, tokens and the clock only).
- ``serve/``: the transports: WebSocket and plain HTTP, OpenAI and captioned routes,
  announcements over HTTP, Wyoming, admission, the outbox, systemd notify.
- ``service.py``: voices, the inference thread, channels and idle unload, put together.
- ``speech/``: the sans-I/O session (messages in, effects out), word timing, message rate.
- ``config.py``: the one frozen Config.
- ``broadcast/``: channels, the bus between instances, the shared clock, timelines.
- ``synthesis/``: the one inference thread, its jobs and the phrase cache.
- ``engines/``: Kokoro, Piper and Hibari behind one seam (``engines/base.py``), voices and packs.
- ``host/`` and ``native/``: the inference process and its memory budget; the native Snake op.
- ``g2p/``: phonemes (espeak-ng, Kokoro's zh and ja front ends) and which word each came from.
- ``sound/``: samples, frames, codecs, an utterance's track, subtitles.
- ``text/``: units, language runs, normalizers, markup, lexicon.
- ``protocol.py``, ``tokens.py``, ``files.py``, ``cache.py``: the wire format and the leaves.
"""

__version__ = "0.1.0"
