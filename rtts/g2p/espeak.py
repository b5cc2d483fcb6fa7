"""IPA phonemes from espeak-ng, through a small ctypes binding.

The library and its data come from the ``espeakng-loader`` wheel, so nothing has to be
installed system-wide. espeak-ng keeps its state (selected voice, clause reader) in
globals and is not thread-safe, so every call into it holds one module-level lock.

Output format: words separated by single spaces, stress marks kept, and the clause
punctuation that ended each clause (``, . ? ! : ;``) attached to the clause's last
word, e.g. ``"həlˈoʊ, wˈɜːld!"``. Both Kokoro and Piper were trained on phonemes with
that punctuation, and it carries the pauses and the question/statement intonation.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading

import espeakng_loader

__all__ = ["phonemize", "punctuation_for_terminator"]

logger = logging.getLogger(__name__)

# From espeak-ng's speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 0x02
_CHARS_UTF8 = 1
_PHONEMES_IPA = 0x02
_PHONEMES_TIE = 0x80
_EE_OK = 0

# Clause terminator flags from espeak-ng's readclause.h (what the WithTerminator call reports).
_CLAUSE_PAUSE = 0x00000FFF
_CLAUSE_INTONATION = 0x00007000
_INTONATION_FULL_STOP = 0x00000000
_INTONATION_COMMA = 0x00001000
_INTONATION_QUESTION = 0x00002000
_INTONATION_EXCLAMATION = 0x00003000
_CLAUSE_TYPE_CLAUSE = 0x00040000
_CLAUSE_TYPE_SENTENCE = 0x00080000
_CLAUSE_TYPE_EOF = 0x00010000
# A semicolon is a comma-intonation clause with a longer pause (30 vs 20 for a comma).
_SEMICOLON_PAUSE = 30

# Source punctuation espeak ends a clause on, mapped to what we emit.
_CLAUSE_PUNCTUATION = {
    ",": ",", "，": ",", "、": ",",
    ".": ".", "。": ".", "…": ".",
    "?": "?", "？": "?",
    "!": "!", "！": "!",
    ":": ":", "：": ":",
    ";": ";", "；": ";",
}  # fmt: skip
# Closing quotes and brackets may sit between a clause's last word and its punctuation or after it.
_CLOSERS = frozenset(")]}\"'”’»」』")
# espeak marks a switch to another language's rules inline, e.g. "(en)" ... "(fr)".
_LANGUAGE_FLAG = re.compile(r"\([a-z]{2,3}(?:-[a-z0-9]+)*\)")
# Control characters would end espeak's C string early (NUL) or confuse its clause reader.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_with_terminator: bool = False
_current_voice: str | None = None


class _Voice(ctypes.Structure):
    # espeak_VOICE from speak_lib.h, used to select a voice by language when no voice has that name.
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


def phonemize(text: str, voice: str = "en-us", tie: str | None = None) -> str:
    """Return espeak-ng's IPA for ``text`` with stress marks and clause punctuation.

    ``voice`` is an espeak-ng voice name or language (``"en-us"``, ``"en-gb"``, ``"fr"``).
    ``tie``, a single character, joins the letters of multi-letter phonemes (``"a^ɪ"``);
    without it they are written plainly (``"aɪ"``). Raises ValueError for an unknown
    voice or a bad tie.
    """
    if tie is not None and len(tie) != 1:
        raise ValueError(f"tie must be a single character, not {tie!r}")
    text = _CONTROL.sub(" ", text)
    if not text.strip():
        return ""
    mode = _PHONEMES_IPA
    if tie is not None:
        mode |= _PHONEMES_TIE | (ord(tie) << 8)
    with _lock:
        lib = _library()
        _select_voice(lib, voice)
        clauses = _read_clauses(lib, text, mode)
    return _join(clauses)


def punctuation_for_terminator(terminator: int) -> str:
    """Map espeak's clause terminator flags to the punctuation that ended the clause.

    Returns "" when the clause ended without punctuation (end of text, or espeak
    breaking an overlong clause).
    """
    if terminator & _CLAUSE_TYPE_EOF:
        return ""
    intonation = terminator & _CLAUSE_INTONATION
    if intonation == _INTONATION_QUESTION:
        return "?"
    if intonation == _INTONATION_EXCLAMATION:
        return "!"
    if intonation == _INTONATION_COMMA:
        return ";" if terminator & _CLAUSE_PAUSE >= _SEMICOLON_PAUSE else ","
    if intonation == _INTONATION_FULL_STOP:
        if terminator & _CLAUSE_TYPE_SENTENCE:
            return "."
        if terminator & _CLAUSE_TYPE_CLAUSE:
            return ":"
    return ""


def _library() -> ctypes.CDLL:
    """Load and initialise libespeak-ng once; the caller holds the lock."""
    global _lib, _with_terminator
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(_Voice)]
    lib.espeak_SetVoiceByProperties.restype = ctypes.c_int
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    # Piper's espeak-ng fork (and newer upstream builds) report how each clause ended.
    # The 1.52 build in espeakng-loader 0.2.4 lacks it; then the punctuation is read back
    # from the source text espeak consumed for the clause (see _clause_punctuation).
    _with_terminator = hasattr(lib, "espeak_TextToPhonemesWithTerminator")
    if _with_terminator:
        fn = lib.espeak_TextToPhonemesWithTerminator
        fn.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int),
        ]
        fn.restype = ctypes.c_char_p
    data_path = espeakng_loader.get_data_path().encode()
    rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path, 0)
    if rate <= 0:
        raise RuntimeError(f"espeak-ng failed to initialise (data at {data_path.decode()!r})")
    logger.debug("espeak-ng initialised (terminator API: %s)", _with_terminator)
    _lib = lib
    return lib


def _select_voice(lib: ctypes.CDLL, voice: str) -> None:
    global _current_voice
    if voice == _current_voice:
        return
    # Forget the old voice first: a failed selection can leave espeak without one.
    _current_voice = None
    name = voice.encode()
    if lib.espeak_SetVoiceByName(name) != _EE_OK:
        # Names are file names ("en-us" works, "en-gb" is the file "en"); fall back to a
        # language match, which is how espeak's own command line resolves "-v en-gb".
        props = _Voice(languages=name)
        if lib.espeak_SetVoiceByProperties(ctypes.byref(props)) != _EE_OK:
            raise ValueError(f"espeak-ng has no voice or language {voice!r}")
    _current_voice = voice


def _read_clauses(lib: ctypes.CDLL, text: str, mode: int) -> list[tuple[str, str]]:
    """Run espeak clause by clause; return (phonemes, punctuation) pairs."""
    raw = text.encode()
    buf = ctypes.create_string_buffer(raw)
    base = ctypes.addressof(buf)
    ptr = ctypes.c_void_p(base)
    terminator = ctypes.c_int(0)
    clauses = []
    while ptr.value is not None:
        start = ptr.value - base
        if _with_terminator:
            out = lib.espeak_TextToPhonemesWithTerminator(
                ctypes.byref(ptr), _CHARS_UTF8, mode, ctypes.byref(terminator)
            )
            punct = punctuation_for_terminator(terminator.value)
        else:
            out = lib.espeak_TextToPhonemes(ctypes.byref(ptr), _CHARS_UTF8, mode)
            end = len(raw) if ptr.value is None else ptr.value - base
            consumed = raw[start:end].decode("utf-8", errors="ignore")
            punct = _clause_punctuation(consumed, at_end=ptr.value is None)
        phonemes = (out or b"").decode("utf-8", errors="ignore")
        clauses.append((phonemes, punct))
        if ptr.value is not None and ptr.value - base <= start:
            # espeak always consumes at least one character; never spin if it does not.
            logger.warning("espeak-ng stopped advancing at byte %d of %d", start, len(raw))
            break
    return clauses


def _clause_punctuation(consumed: str, *, at_end: bool) -> str:
    """Find the punctuation that ended a clause in the source text espeak consumed for it.

    espeak reads one character past the clause's punctuation and spaces (the first
    letter of the next clause) before it decides the clause has ended, so that
    character is dropped first. Then, going backwards over spaces and closing quotes,
    the earliest punctuation mark of the trailing run is the one that ended the clause
    ("?!" is a question; "..." a full stop).
    """
    if not at_end and consumed and not consumed[-1].isspace() and consumed[-1] not in _CLAUSE_PUNCTUATION:
        consumed = consumed[:-1]
    found = ""
    for ch in reversed(consumed):
        if ch in _CLAUSE_PUNCTUATION:
            found = _CLAUSE_PUNCTUATION[ch]
        elif not (ch.isspace() or ch in _CLOSERS):
            break
    return found


def _join(clauses: list[tuple[str, str]]) -> str:
    parts: list[str] = []
    for phonemes, punct in clauses:
        words = _LANGUAGE_FLAG.sub("", phonemes).split()
        if not words:
            # A clause of bare punctuation ("...") has nothing to speak; its pause is
            # kept only when the previous clause ended without punctuation of its own.
            if punct and parts and parts[-1][-1] not in _CLAUSE_PUNCTUATION:
                parts[-1] += punct
            continue
        parts.append(" ".join(words) + punct)
    return " ".join(parts)
