"""Grapheme-to-phoneme conversion: espeak-ng IPA and helpers to feed it to models."""

from rtts.g2p.espeak import phonemize
from rtts.g2p.split import split_phonemes

__all__ = ["phonemize", "split_phonemes"]
