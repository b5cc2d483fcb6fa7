"""Audio as the client gets it: ``audio`` (formats, resampling, framing, WAV), ``codecs``
(mp3, Opus, AAC, FLAC), ``track`` (one utterance's frames with exact timestamps) and
``subtitles`` (WebVTT and SRT from timed words).

Imports only ``text`` below it.
"""
