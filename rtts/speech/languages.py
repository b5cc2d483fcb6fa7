"""The languages a request may name, and the one a voice implies when it names none (pure)."""

from __future__ import annotations

from rtts.engines.base import VoiceInfo
from rtts.text.segment import LATIN

__all__ = ["SPOKEN_LANGS", "implied_lang", "spoken_lang"]

# Languages text can be read in; a request's ``lang`` may name them with a region.
SPOKEN_LANGS = ("en", "en-gb", "zh", "ja", "es", "fr", "it", "pt-br")
_LANG_ALIASES = {
    "en-us": "en", "zh-cn": "zh", "zh-hans": "zh", "cmn": "zh", "ja-jp": "ja",
    "pt": "pt-br", "es-es": "es", "fr-fr": "fr", "it-it": "it",
}  # fmt: skip
# Latin-script languages a voice made for them implies when the request names none:
# script detection cannot tell Spanish from English (English stays the default).
_IMPLIED_LANGS = frozenset(LATIN) - {"en"}


def spoken_lang(lang: str) -> str | None:
    """A request's ``lang`` as one of SPOKEN_LANGS, or None: not offered."""
    hint = _LANG_ALIASES.get(lang.lower(), lang.lower())
    return hint if hint in SPOKEN_LANGS else None


def implied_lang(voice: VoiceInfo) -> str | None:
    """The language a voice made for a Latin-script language other than English implies."""
    return voice.langs[0] if voice.langs and voice.langs[0] in _IMPLIED_LANGS else None
