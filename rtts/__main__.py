"""Command line: ``rtts serve``, ``rtts say``, ``rtts voices``.

The only place that configures logging, installs signal handlers and picks the
event loop (uvloop or asyncio); library modules never do.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rtts import config, protocol
from rtts.sound import audio, subtitles

log = logging.getLogger("rtts")


def _runner(loop_name: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    if loop_name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if loop_name == "uvloop":
                raise SystemExit("rtts: --loop uvloop asked for, but uvloop is not installed") from None
        else:
            return lambda coro: uvloop.run(coro)
    return asyncio.run


async def _serve(cfg: config.Config) -> int:
    from rtts.serve.sdnotify import Notifier, listen_socket
    from rtts.serve.server import RttsServer
    from rtts.service import Service

    notifier = Notifier()
    server = RttsServer(Service(cfg))  # indexes the voices (reads no model)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    rescans: set[asyncio.Task[Any]] = set()

    def on_stop(sig: signal.Signals) -> None:
        if stop.is_set():
            log.info("%s again: closing connections now", sig.name)
            server.cut_grace()
        stop.set()

    def on_hup() -> None:
        task = loop.create_task(server.service.rescan())
        rescans.add(task)
        task.add_done_callback(rescans.discard)

    # Before the port is bound and "listening on" logged: a SIGTERM right after that line
    # (a supervisor's stop, a test's) would otherwise find the default action and kill the
    # process with no drain (once, under the full suite: exit -15 instead of 0).
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig)
    loop.add_signal_handler(signal.SIGHUP, on_hup)
    try:
        await server.start(sock=listen_socket())
    except OSError as exc:
        log.error("cannot listen on %s port %d: %s", cfg.host, cfg.port, exc)
        server.service.stop()
        return 1
    if cfg.preload:
        voice = server.service.registry.default_voice
        notifier.extend_timeout(120, f"loading {voice}")
        preload = loop.create_task(server.service.preload_default())
        stopped = loop.create_task(stop.wait())
        await asyncio.wait({preload, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not preload.done():
            preload.cancel()  # stopped while loading
        elif not preload.result():
            log.error("could not preload %s; serving the other voices", voice)
    if not stop.is_set():
        notifier.ready(f"serving {len(server.service.registry.voices)} voices on {', '.join(server.urls)}")
    watchdog = loop.create_task(notifier.watchdog(lambda: _healthy(server, notifier)))
    await stop.wait()
    log.info("shutting down (drain %.1f s, at most %.1f s)", cfg.drain_grace, cfg.shutdown_timeout)
    notifier.stopping()
    watchdog.cancel()
    try:
        await asyncio.wait_for(server.shutdown(), cfg.shutdown_timeout)
    except TimeoutError:
        log.warning("shutdown took longer than %.1f s; exiting anyway", cfg.shutdown_timeout)
    log.info("stopped")
    return 0


def _healthy(server: Any, notifier: Any) -> bool:
    """The inference thread has shown progress within one watchdog interval."""
    return server.service.worker.progress_age() < notifier.watchdog_s


class _Redact(logging.Filter):
    """Defence in depth: no log line carries the token, whatever logged it."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if any(s in text for s in self._secrets):
            for secret in self._secrets:
                text = text.replace(secret, "[token]")
            record.msg, record.args = text, None
        return True


async def _say(cfg: config.Config, args: argparse.Namespace, text: str) -> int:
    from rtts.serve.speech_stream import speak
    from rtts.service import Service

    captions = {fmt: path for fmt, path in (("vtt", args.vtt), ("srt", args.srt)) if path}
    service = Service(cfg)
    service.start()
    try:
        samples, rate, end, words = await speak(
            service, text, args.voice, args.lang, args.speed, args.sample_rate, words="word" if captions else None
        )
    except protocol.ProtocolError as exc:
        hint = "; --max-text-chars raises the limit" if exc.code is protocol.ErrorCode.TEXT_TOO_LONG else ""
        print(f"rtts: {exc.code.value}: {exc.message}{hint}", file=sys.stderr)
        return 2
    finally:
        service.stop()
    try:
        Path(args.output).write_bytes(audio.wav_bytes(samples, rate))
        if captions:
            # From the same synthesis as the WAV: a voice that draws its durations at random
            # (Piper's noise_w) speaks a text differently each time.
            cues = subtitles.cues(words, text, rate)
            for fmt, path in captions.items():
                Path(path).write_text(subtitles.render(fmt, cues), encoding="utf-8")
                print(f"{path}: {len(cues)} cues", file=sys.stderr)
    except OSError as exc:  # checked before the synthesis; what changed since is said the same way
        print(f"rtts: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    stats = end.stats
    print(
        f"{args.output}: {len(samples) / rate:.2f} s at {rate} Hz, "
        f"first audio {stats['ttfa_ms']:.0f} ms, rtf {stats['rtf']:.2f}",
        file=sys.stderr,
    )
    return 0


def _say_text(arg: str) -> str:
    """``rtts say``'s text: the argument, or standard input for ``-``."""
    if arg != "-":
        return arg
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"standard input is not {exc.encoding}: {exc.reason}") from None


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written (a missing or unwritable folder, a folder's name), or
    None: said before the synthesis, not after it as a traceback."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        return f"{path} is a directory"
    if not folder.is_dir():
        return f"cannot write {path}: no directory {folder}"
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        return f"cannot write {path}: permission denied"
    return None


def _voices(cfg: config.Config, args: argparse.Namespace) -> int:
    from rtts.engines.voices import VoiceRegistry

    if args.action == "import":
        return _import_voices(cfg, args.files, args.force)
    registry = VoiceRegistry.discover(cfg.models_dir, cfg.cache_dir or Path(), cfg.threads, default_voice=cfg.default_voice)
    rows = [("ID", "ENGINE", "LANGS", "GENDER", "GRADE", "RATE", "NAME")]
    for v in registry.voices.values():
        mark = " (default)" if v.id == registry.default_voice else ""
        rows.append(
            (v.id, v.engine, ",".join(v.langs), v.gender or "-", v.grade or "-", str(v.native_rate), v.name + mark)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    print(f"\nmodels dir: {cfg.models_dir}", file=sys.stderr)
    return 0


def _import_voices(cfg: config.Config, files: list[Path], force: bool = False) -> int:
    """Copy Kokoro voice files (any form ``voicepacks`` reads) into the models directory.

    Each file is checked whole (``voicepacks.scan(read=True)``: its name, every voice
    name and every style in it) on the copy that is installed, so what was checked is
    what the server reads. A file already there is kept unless ``force``.
    """
    assert cfg.models_dir is not None
    if not files:
        print("rtts: voices import needs at least one file", file=sys.stderr)
        return 2
    status = 0
    for path in files:
        try:
            names = _import_voice_file(cfg.models_dir, path, force)
        except (ValueError, OSError) as exc:
            print(f"rtts: {path}: {exc}; not imported", file=sys.stderr)
            status = 1
            continue
        print(f"{path.name}: {len(names)} voices ({' '.join(sorted(names))}) into {cfg.models_dir}")
    print("a running server picks them up on SIGHUP (systemctl reload rtts)", file=sys.stderr)
    return status


def _import_voice_file(models_dir: Path, path: Path, force: bool) -> list[str]:
    """Install ``path`` as ``models_dir / path.name``; the voices in it, or ValueError/OSError."""
    import os
    import shutil
    import tempfile

    from rtts import files
    from rtts.engines import voicepacks

    if path.name.startswith("."):
        raise ValueError("a hidden file name: discovery would not see it")
    target = models_dir / path.name  # a name, never a path: nothing lands outside models_dir
    if os.path.lexists(target) and not force:
        raise ValueError(f"{target} already exists (--force replaces it)")
    data = files.read_regular(path, voicepacks.MAX_FILE_BYTES)
    models_dir.mkdir(parents=True, exist_ok=True)
    # Written and checked under a hidden directory (discovery skips it), then moved in
    # whole: a server rescanning meanwhile never sees a half-written file.
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=models_dir))
    try:
        copy = staging / path.name
        copy.write_bytes(data)
        names = sorted(voicepacks.scan(copy, read=True))
        if force:
            os.replace(copy, target)  # replaces a symlink there, never writes through it
        else:
            os.link(copy, target)  # fails if the name was taken meanwhile
    except FileExistsError:
        raise ValueError(f"{target} already exists (--force replaces it)") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rtts", description="Real-time text-to-speech over WebSocket.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the WebSocket/HTTP server")
    from rtts.engines.registry import KINDS

    preferred = ",".join(f"{lang}={voice}" for k in KINDS for lang, voice in k.lang_voices)
    config.add_flags(serve, shown_defaults={"lang_voices": preferred or "none"})
    config.add_engine_flags(serve, [(k.name, k.first_unit_chars) for k in KINDS])
    say = sub.add_parser("say", help="speak text into a WAV file, without a server")
    say.add_argument("text", help="the text to speak; - reads it from standard input")
    say.add_argument("-o", "--output", default="out.wav", metavar="FILE", help="the WAV file to write [default out.wav]")
    say.add_argument("--voice", help="a voice id (`rtts voices`) [default: by the text's language]")
    say.add_argument("--lang", help="the text's language, e.g. en-gb, es, fr [default: by its script]")
    say.add_argument("--speed", type=float, help="0.5 to 2.0 [default 1.0]")
    say.add_argument("--vtt", metavar="FILE", help="also write the words' timing as WebVTT subtitles")
    say.add_argument("--srt", metavar="FILE", help="also write the words' timing as SRT subtitles")
    config.add_flags(say, ["models_dir", "cache_dir", "threads", "log_level", "default_voice", "sample_rate",
                           "max_text_chars", "inference_timeout", "generator"])
    voices = sub.add_parser(
        "voices",
        help="list every voice found; `rtts voices import FILE...` copies Kokoro voice files into the models dir",
    )
    voices.add_argument("action", nargs="?", choices=["list", "import"], default="list")
    voices.add_argument("files", nargs="*", type=Path, help="for import: .bin, .npy, .npz or a kokoro-js .tgz")
    voices.add_argument("--force", action="store_true", help="for import: replace a file of the same name (after the files)")
    config.add_flags(voices, ["models_dir", "cache_dir", "default_voice", "log_level"])
    from rtts.play import settings as play_settings

    play = sub.add_parser("play", help="hear channels of an rtts server on this box's sound output, in step")
    play_settings.add_flags(play)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "play":  # a client: its own settings, none of the server's
        from rtts.play.main import main as play

        return play(args)
    try:
        cfg = config.from_args(args)
    except (ValueError, OSError) as exc:
        print(f"rtts: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # websockets' debug log dumps every header and frame (audio, and a client's token), and
    # its INFO log has a line per plain HTTP request: /healthz probes would flood the journal.
    logging.getLogger("websockets").setLevel(max(logging.WARNING, logging.getLogger().level))
    if cfg.token or cfg.publish_token:
        from rtts.tokens import encode_token

        secrets = [t for t in (cfg.token, cfg.publish_token) if t]
        redact = _Redact([*secrets, *(encode_token(t) for t in secrets)])
        for handler in logging.getLogger().handlers:
            handler.addFilter(redact)
    if args.command == "voices":
        return _voices(cfg, args)
    run = _runner(cfg.loop)
    if args.command == "say":
        problem = next(filter(None, (_unwritable(p) for p in (args.output, args.vtt, args.srt) if p)), None)
        try:
            text = _say_text(args.text)
        except (OSError, ValueError) as exc:
            problem = str(exc)
        if problem is not None:
            print(f"rtts: {problem}", file=sys.stderr)
            return 2
        # A one-shot run ends long before any idle time: it never unloads (nor says it would).
        return run(_say(dataclasses.replace(cfg, idle_unload=0.0), args, text))
    return run(_serve(cfg))


if __name__ == "__main__":
    sys.exit(main())
