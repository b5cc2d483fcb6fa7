"""One frozen Config, built once from command-line flags with ``RTTS_*`` fallbacks.

Precedence: flag > environment variable > default. Values are validated here, once,
with messages that name the flag and the variable, so the rest of the code can
trust them.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rtts import protocol
from rtts.host import cgroup, memory
from rtts.sound import codecs


def _default_cache_dir() -> Path:
    # systemd's CacheDirectory= exports CACHE_DIRECTORY; honour it so the unit needs no flag.
    if os.environ.get("CACHE_DIRECTORY"):
        return Path(os.environ["CACHE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rtts"


def _default_models_dir() -> Path:
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0]) / "models"
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "rtts" / "models"


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8765
    models_dir: Path | None = None
    cache_dir: Path | None = None
    idle_unload: float = 300.0
    # While no model is loaded (at the start, after the idle unload), keep a bare inference
    # process ready (Python, numpy, ONNX Runtime: ~25 MB anonymous): the next request's
    # wake skips the process start (docs/benchmarks.md, "Wake after the idle unload").
    spare_process: bool = True
    # How long one inference call (a unit's run) may take before the inference process is
    # taken for hung and restarted (rtts/host/client.py). A minute is a hang on any real
    # box; a CPU emulated by qemu-user needs several (benchmarks/arm64.py).
    inference_timeout: float = 60.0
    threads: int = 0  # 0: one per core
    log_level: str = "info"
    loop: str = "auto"
    token: str | None = None
    # Channels (rtts/broadcast/channels.py): publishing needs this second token; without it nobody may publish.
    publish_token: str | None = None
    bus: str | None = None  # "redis://host:port/db": announcements reach every instance; None: this process only
    channel_queue: int = 16  # announcements waiting per channel on an instance
    # Playing in step (docs/protocol.md): how far ahead of now an announcement's play_at is
    # set, in seconds. sync_lead 0: learnt from how late audio came before, within
    # sync_min_lead..sync_max_lead (the bound on the delay this adds); sync_gap: silence
    # between consecutive announcements; shared_clock: the host's own clock (kept by
    # NTP/chrony on every instance) or the Redis server's (``bus``, through TIME).
    sync_lead: float = 0.0
    sync_min_lead: float = 0.3
    sync_max_lead: float = 2.0
    sync_gap: float = 0.25
    shared_clock: str = "host"
    default_voice: str | None = None
    max_text_chars: int = 5000
    max_message_bytes: int = 65536
    max_utterances: int = 32  # live utterances per connection
    # Messages one connection may send (rtts/speech/ratelimit.py): message_burst at once, then
    # message_rate a second. More are dropped (error rate_limited), and a client that
    # keeps on is closed (1008): one client's flood costs that client only.
    message_rate: float = 200.0
    message_burst: int = 64
    # What one utterance may produce, whatever its text: audio in total (speech and
    # pauses), and <break> pauses in total (each break is also at most 10 s). Seconds.
    max_audio: float = 600.0
    max_pause: float = 60.0
    sample_rate: int = 24000
    format: str = "pcm16"
    frame_ms: int = 20
    # Default voice per language, for text the chosen voice cannot speak: ((lang, voice id), ...);
    # None: the engines' own preferences (EngineKind.lang_voices).
    lang_voices: tuple[tuple[str, str], ...] | None = None
    # Who may connect (rtts/serve/access.py).
    allow_origin: tuple[str, ...] = ()  # empty: the page's own origin and localhost; "*": any
    # Host names browsers may use for this server without a token (access.host_allowed):
    # IP addresses, localhost and this machine's name always; "*": any.
    allow_host: tuple[str, ...] = ()
    max_connections: int = 64
    max_connections_per_ip: int = 16
    trusted_proxies: tuple[str, ...] = ()  # peers whose X-Forwarded-For names the client
    # Sockets that have not sent a whole request yet (rtts/serve/plain_http.py): how long each
    # may take, and how many may wait at once (a newcomer closes the longest waiting).
    handshake_timeout: float = 10.0
    max_handshakes: int = 128
    # Slow clients (rtts/serve/outbox.py): bytes queued per connection before synthesis for it
    # pauses, and how long a client may accept nothing before it is dropped.
    send_buffer: int = 262144
    send_stall: float = 30.0
    # Lifecycle: SIGTERM keeps answering for drain_grace seconds (new WebSockets get
    # 503, /readyz 503), then closes everything; the process is gone within shutdown_timeout.
    drain_grace: float = 0.0
    shutdown_timeout: float = 10.0
    preload: bool = False  # load the default voice before reporting ready
    # What to do with a new utterance that cannot start in time (see docs/protocol.md).
    admission: str = "queue"
    admission_max_wait: float = 2.0  # seconds
    # The load of the inference thread (its streams' RTFs summed, this one's included) above
    # which a new utterance is late: 1.0 is the thread's whole time. At 0.8 on a 2-core box
    # 5 of 1,502 streams had a short gap (the HTTP routes, the mixed path's change of voice),
    # and at 0.7 none of the HTTP routes' 100 in the same alternating command
    # (docs/benchmarks.md, "Let in between two runs, and the bound at 0.8"); and at 0.8 a
    # stream told it starts at once waited up to 3.8 s for the crowd's audio, while at either
    # bound the thread is on work all the time streams wait ("While streams wait for room").
    admission_max_load: float = 0.7
    phrase_cache_mb: float = 16.0
    # Kokoro's waveform generator (rtts/engines/kokoro_student.py): "auto", the distilled
    # student in the languages where it passed the quality gates and Kokoro's own elsewhere;
    # "student" everywhere; "teacher", Kokoro's own everywhere.
    generator: str = "auto"
    # Longest first unit of an utterance, by engine name, where it differs from the
    # engine's own (EngineKind.first_unit_chars): ((engine, chars), ...).
    first_unit_chars: tuple[tuple[str, int], ...] = ()
    # Wyoming (Home Assistant) on its own TCP port; None: off, 0: a free port (tests).
    wyoming_port: int | None = None
    # A Wyoming connection between requests waits (in the handshake gate, see
    # access.Waiting) at most this long; its first event must come within handshake_timeout.
    wyoming_idle_timeout: float = 60.0
    zeroconf: bool = False  # announce the Wyoming server by mDNS
    # OpenAI voice names (alloy, nova...) → voice ids, over rtts/serve/openai_voices.json's table.
    openai_voices: tuple[tuple[str, str], ...] = ()
    # MB of anonymous memory the server and its inference process together may hold
    # (rtts/host/memory.py). None: the cap of the cgroup the service runs in, less headroom
    # (memory.budget_for), or no budget outside one; 0: no budget.
    memory_budget: float | None = None
    # MB of whole response bodies (/dev/captioned_speech with stream false: the base64 of
    # its audio, its timestamps) the server may hold for all clients at once. Each is
    # sized from its text before synthesis and refused then if it cannot fit
    # (captioned_api.whole_size); 20 MB is ~5 minutes of 24 kHz WAV as base64.
    max_whole_body_mb: float = 20.0

    def __post_init__(self) -> None:
        # Fill derived defaults here so every way of building a Config agrees.
        if self.models_dir is None:
            object.__setattr__(self, "models_dir", _default_models_dir())
        if self.cache_dir is None:
            object.__setattr__(self, "cache_dir", _default_cache_dir())
        if self.threads <= 0:
            cores = len(os.sched_getaffinity(0)) or 1
            object.__setattr__(self, "threads", min(cores, cgroup.cpu_limit() or cores))
        if self.memory_budget is None:
            budget = memory.budget_for(cgroup.memory_limit())
            object.__setattr__(self, "memory_budget", 0.0 if budget is None else budget / memory.MB)
        problems = []
        if not 0 < self.port < 65536 and self.port != 0:
            problems.append(f"port {self.port} is not a TCP port")
        if self.idle_unload < 0:
            problems.append("idle-unload must be >= 0 seconds")
        if not 1 <= self.inference_timeout <= 3600:
            problems.append("inference-timeout must be 1 to 3600 seconds")
        if self.loop not in ("auto", "asyncio", "uvloop"):
            problems.append("loop must be auto, asyncio or uvloop")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            problems.append("log-level must be debug, info, warning or error")
        if self.sample_rate not in protocol.SAMPLE_RATES:
            problems.append(f"sample-rate must be one of {protocol.SAMPLE_RATES}")
        if self.format not in protocol.FORMATS:
            problems.append(f"format must be one of {protocol.FORMATS}")
        elif self.format == "opus":
            try:
                codecs.check_opus(self.sample_rate, self.frame_ms, protocol.SAMPLE_RATES)
            except ValueError as exc:
                problems.append(f"format opus: {exc}")
        if not protocol.FRAME_MS_RANGE[0] <= self.frame_ms <= protocol.FRAME_MS_RANGE[1]:
            problems.append("frame-ms must be within 10..200")
        if self.wyoming_port is not None and not 0 <= self.wyoming_port < 65536:
            problems.append(f"wyoming-port {self.wyoming_port} is not a TCP port")
        if self.wyoming_idle_timeout <= 0:
            problems.append("wyoming-idle-timeout must be positive")
        if self.zeroconf and self.wyoming_port is None:
            problems.append("zeroconf announces the Wyoming server: give --wyoming-port too")
        if self.generator not in ("auto", "student", "teacher"):
            problems.append("generator must be auto, student or teacher")
        if self.admission not in ("queue", "refuse", "close"):
            problems.append("admission must be queue, refuse or close")
        if not all(1 <= chars <= 250 for _, chars in self.first_unit_chars):
            problems.append("first-unit-chars-* must be within 1..250")
        if self.admission_max_wait < 0 or self.phrase_cache_mb < 0:
            problems.append("admission-max-wait and phrase-cache-mb must be >= 0")
        if not self.admission_max_load > 0:
            problems.append("admission-max-load must be positive")
        if not 0 < self.max_pause <= self.max_audio:
            problems.append("max-pause must be positive and at most max-audio")
        if self.max_text_chars < 1 or self.max_message_bytes < 256 or self.max_utterances < 1:
            problems.append("limits must be positive (max-message-bytes at least 256)")
        if self.message_rate <= 0 or self.message_burst < 1:
            problems.append("message-rate must be positive and message-burst at least 1")
        if self.token is not None and not self.token.strip():
            problems.append("the token is empty: give a token, or none to run without one")
        if self.handshake_timeout <= 0 or self.max_handshakes < 1:
            problems.append("handshake-timeout must be positive and max-handshakes at least 1")
        if self.max_connections < 1 or self.max_connections_per_ip < 1:
            problems.append("max-connections and max-connections-per-ip must be at least 1")
        if self.send_buffer < 4096 or self.send_stall <= 0:
            problems.append("send-buffer must be at least 4096 bytes and send-stall positive")
        least = memory.MIN_BUDGET // memory.MB
        if self.memory_budget is not None and not (self.memory_budget == 0 or least <= self.memory_budget < 1 << 30):
            problems.append(f"memory-budget must be at least {least} MB (or 0: none)")
        if not 1 <= self.max_whole_body_mb < 1 << 20:
            problems.append("max-whole-body-mb must be at least 1")
        if self.channel_queue < 1:
            problems.append("channel-queue must be at least 1")
        if self.bus is not None and not self.bus.startswith(("redis://", "rediss://", "unix://")):
            problems.append("bus must be a redis:// (or rediss://, unix://) URL")
        if not 0 < self.sync_min_lead <= self.sync_max_lead <= 60:
            problems.append("sync-min-lead and sync-max-lead must be positive, min <= max <= 60 s")
        if not 0 <= self.sync_lead <= self.sync_max_lead:
            problems.append("sync-lead must be 0 (learnt) or positive, at most sync-max-lead")
        if not 0 <= self.sync_gap <= 60:
            problems.append("sync-gap must be within 0..60 s")
        if self.shared_clock not in ("host", "bus"):
            problems.append("shared-clock must be host or bus")
        elif self.shared_clock == "bus" and self.bus is None:
            problems.append("shared-clock bus follows the Redis server's clock: give --bus too")
        if self.drain_grace < 0 or self.shutdown_timeout <= self.drain_grace:
            problems.append("shutdown-timeout must be longer than drain-grace (>= 0)")
        if problems:
            raise ValueError("; ".join(problems))

    def first_unit_chars_for(self, engine: str, default: int) -> int:
        """The longest first unit for voices of ``engine``, whose own length is ``default``."""
        return dict(self.first_unit_chars).get(engine, default)

    @property
    def limits(self) -> dict[str, int | float]:
        return {
            "max_text_chars": self.max_text_chars,
            "max_message_bytes": self.max_message_bytes,
            "max_utterances": self.max_utterances,
            "message_rate": self.message_rate,
            "message_burst": self.message_burst,
            "max_audio_ms": round(self.max_audio * 1000),
            "max_pause_ms": round(self.max_pause * 1000),
            "max_connections": self.max_connections,
            "max_connections_per_ip": self.max_connections_per_ip,
            "send_buffer_bytes": self.send_buffer,
            "send_stall_ms": round(self.send_stall * 1000),
            "channel_queue": self.channel_queue,
            "memory_budget_mb": round(self.memory_budget or 0),
            "sync_max_lead_ms": round(self.sync_max_lead * 1000),
        }

    @property
    def memory_budget_bytes(self) -> int | None:
        """The budget in bytes; None when there is none."""
        return int(self.memory_budget * memory.MB) if self.memory_budget else None


def parse_pairs(raw: str, left: str = "lang") -> tuple[tuple[str, str], ...]:
    """``"zh=kokoro/zf_xiaoxiao,ja=kokoro/jf_alpha"`` → ((key, voice), ...); ValueError when malformed."""
    pairs = []
    for item in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, voice = item.partition("=")
        if not sep or not key.strip() or not voice.strip():
            raise ValueError(f"entry {item!r} is not {left}=voice")
        pairs.append((key.strip().lower(), voice.strip()))
    return tuple(pairs)


def parse_lang_voices(raw: str) -> tuple[tuple[str, str], ...]:
    return parse_pairs(raw, "lang")


def parse_openai_voices(raw: str) -> tuple[tuple[str, str], ...]:
    return parse_pairs(raw, "name")


def _words(raw: str) -> tuple[str, ...]:
    """A comma- or space-separated list, as flags and environment variables give it."""
    return tuple(w for w in re.split(r"[,\s]+", raw) if w)


def _yes(raw: str) -> bool:
    if raw.lower() in ("1", "yes", "true", "on"):
        return True
    if raw.lower() in ("0", "no", "false", "off"):
        return False
    raise ValueError(raw)


# flag name → (parse, help). Each flag also reads RTTS_<NAME> from the environment.
_SERVE_FLAGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "host": (str, "address to listen on"),
    "port": (int, "TCP port (0 picks a free one)"),
    "models_dir": (Path, "folder scanned for extra Piper voices and Kokoro style files"),
    "cache_dir": (Path, "where the Kokoro model is assembled once"),
    "idle_unload": (float, "seconds with no client before models are unloaded (0: never)"),
    "spare_process": (_yes, "keep a bare inference process (no model; ~25 MB anonymous, ~53 MB RSS) ready at the "
                      "start and after the idle unload, so the next request skips its start (default on)"),
    "inference_timeout": (float, "seconds one synthesis call may take before the inference process is taken "
                          "for hung and restarted; raise it on an emulated CPU"),
    "threads": (int, "ONNX Runtime intra-op threads (default: one per core the cgroup's CPU quota allows)"),
    "log_level": (str, "debug, info, warning or error"),
    "loop": (str, "event loop: auto, asyncio or uvloop"),
    "token": (str, "require this token, in hello or Sec-WebSocket-Protocol (prefer a file: flags show in ps)"),
    "token_file": (Path, "read the token from this file (systemd: LoadCredential=, then %%d/token)"),
    "publish_token": (str, "the token that allows publishing announcements to channels (prefer the file)"),
    "publish_token_file": (Path, "read the publish token from this file"),
    "bus": (str, "redis://HOST:PORT/DB: share channel announcements with every instance using that Redis"),
    "channel_queue": (int, "announcements waiting per channel; more are refused with queue_full"),
    "sync_lead": (float, "seconds ahead an announcement's play_at is set, fixed (default: learnt from how late "
                  "audio came, within sync-min-lead..sync-max-lead)"),
    "sync_min_lead": (float, "the least lead, in seconds"),
    "sync_max_lead": (float, "the most lead, in seconds: the bound on the delay playing in step adds"),
    "sync_gap": (float, "seconds of silence between consecutive announcements of a channel"),
    "shared_clock": (str, "the clock kiosks follow: host (this host's, kept by NTP) or bus (the Redis server's; "
                     "needs --bus)"),
    "default_voice": (str, "voice used when a client names none"),
    "max_text_chars": (int, "longest text one utterance may hold"),
    "max_message_bytes": (int, "largest message accepted; larger closes with 1009"),
    "max_utterances": (int, "live utterances per connection"),
    "message_rate": (float, "messages a second one connection may send after a burst; more get rate_limited"),
    "message_burst": (int, "messages one connection may send at once; a client that keeps on over the rate is "
                      "closed (1008) once it owes this many"),
    "max_audio": (float, "seconds of audio one utterance may produce; more ends it with audio_too_long"),
    "max_pause": (float, "seconds of <break> pauses one utterance may hold; longer pauses are cut short"),
    "sample_rate": (int, "default output sample rate"),
    "format": (str, "default output format: pcm16, f32, mulaw or opus"),
    "frame_ms": (int, "default audio frame length in ms"),
    "lang_voices": (
        parse_lang_voices,
        "default voice per language for text the chosen voice cannot speak, e.g. zh=kokoro/zf_xiaoxiao,ja=kokoro/jf_alpha",
    ),
    "allow_origin": (_words, "browser origins allowed to connect, comma-separated, or * (default: own and localhost)"),
    "allow_host": (_words, "host names browsers may reach this server by, besides its addresses, localhost and "
                   "its own name, comma-separated, or * (against DNS rebinding)"),
    "max_connections": (int, "WebSocket connections in total; more get HTTP 503"),
    "max_connections_per_ip": (int, "WebSocket connections per client address; more get HTTP 429"),
    "trusted_proxies": (_words, "proxy addresses whose X-Forwarded-For is believed, comma-separated"),
    "handshake_timeout": (float, "seconds a new socket has to send its whole request"),
    "max_handshakes": (int, "sockets that may wait at once for their request; more close the oldest"),
    "send_buffer": (int, "bytes queued for one client before its synthesis pauses"),
    "send_stall": (float, "seconds a client may accept no data before it is dropped"),
    "drain_grace": (float, "seconds to keep answering (503) after SIGTERM before closing connections"),
    "shutdown_timeout": (float, "seconds after SIGTERM by which the process has exited"),
    "preload": (_yes, "load the default voice before reporting ready"),
    "admission": (str, "a new utterance that cannot start in time: queue it, refuse it (error busy) or close (1013)"),
    "admission_max_wait": (float, "seconds of expected wait above which a new utterance counts as late"),
    "admission_max_load": (float, "load of the inference thread (its streams' RTFs summed, 1.0 its whole time) above which a new utterance counts as late"),
    "phrase_cache_mb": (float, "memory for replaying repeated short texts (0: off)"),
    "generator": (str, "Kokoro's waveform generator: auto (the distilled student where it passed its quality gates), student or teacher"),
    "wyoming_port": (int, "also serve Wyoming (Home Assistant) on this TCP port, e.g. 10200"),
    "wyoming_idle_timeout": (float, "seconds a Wyoming connection may wait between requests before it is closed"),
    "zeroconf": (_yes, "announce the Wyoming server by mDNS (_wyoming._tcp) for Home Assistant's discovery"),
    "openai_voices": (parse_openai_voices, "OpenAI voice names for /v1/audio/speech, e.g. alloy=piper/en_US-joe-medium"),
    "memory_budget": (float, "MB of anonymous memory the server and its inference process may hold together: "
                      "models and front ends are let go of, and runs shortened, to stay under it (0: none; "
                      "default: the cgroup's cap less a fifth)"),
    "max_whole_body_mb": (float, "MB of non-streamed captioned bodies (stream: false) the server may hold for all "
                          "clients at once; one that would not fit is refused before its synthesis"),
}
# One flag per registered engine (--first-unit-chars-NAME, RTTS_FIRST_UNIT_CHARS_NAME).
_FIRST_UNIT = "first_unit_chars_"


def add_engine_flags(parser: argparse.ArgumentParser, engines: list[tuple[str, int]]) -> None:
    """``--first-unit-chars-NAME`` for each (engine name, its own first-unit length)."""
    for name, default in engines:
        env = "RTTS_" + (_FIRST_UNIT + name).upper()
        parser.add_argument(
            "--" + (_FIRST_UNIT + name).replace("_", "-"), dest=_FIRST_UNIT + name, type=int, default=None,
            help=f"longest first unit of a {name.capitalize()} utterance (sets time to first audio) "
            f"[env {env}; default {default}]",
        )


def add_flags(
    parser: argparse.ArgumentParser, names: list[str] | None = None, shown_defaults: Mapping[str, str] = {}
) -> None:
    """Flags for Config fields; ``shown_defaults``: how a default decided elsewhere is shown."""
    defaults = {f.name: f.default for f in fields(Config)}
    for name in names or list(_SERVE_FLAGS):
        parse, text = _SERVE_FLAGS[name]
        env = "RTTS_" + name.upper()
        default = defaults.get(name)
        shown = "none" if default == () else default if default not in (None, 0) else "auto"
        if isinstance(default, tuple) and default and isinstance(default[0], tuple):
            shown = ",".join(f"{k}={v}" for k, v in default)  # as it is typed: zh=kokoro/zf_xiaoxiao
        if name == "drain_grace":
            shown = default
        if name == "wyoming_port":
            shown = "off"
        shown = shown_defaults.get(name, shown)
        flag = "--" + name.replace("_", "-")
        if parse is _yes and default is True:  # on by default: --no-x turns it off
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{text} [env {env}=0]")
            continue
        if parse is _yes:
            parser.add_argument(flag, dest=name, action="store_const", const=True, default=None,
                                help=f"{text} [env {env}=1]")
            continue
        parser.add_argument(flag, dest=name, type=parse, default=None, help=f"{text} [env {env}; default {shown}]")


def from_args(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Config:
    """Flags, then RTTS_* variables, then defaults. Raises ValueError with readable text."""
    values: dict[str, Any] = {}
    for name, (parse, _) in _SERVE_FLAGS.items():
        flag = getattr(args, name, None)
        if flag is not None:
            values[name] = flag
            continue
        env = "RTTS_" + name.upper()
        raw = environ.get(env)
        if raw == "" and name == "token":
            raise ValueError(f"{env} is set but empty: give a token, or unset it to run without one")
        if raw is None or raw == "":
            continue
        try:
            values[name] = parse(raw)
        except ValueError:
            raise ValueError(f"{env}={raw!r} is not a valid {parse.__name__}") from None
    first_unit = {k[len(_FIRST_UNIT):]: v for k, v in vars(args).items() if k.startswith(_FIRST_UNIT) and v is not None}
    for env, raw in environ.items():
        name = env[len("RTTS_") :].lower()
        if env.startswith("RTTS_") and name.startswith(_FIRST_UNIT) and raw and name[len(_FIRST_UNIT) :] not in first_unit:
            try:
                first_unit[name[len(_FIRST_UNIT) :]] = int(raw)
            except ValueError:
                raise ValueError(f"{env}={raw!r} is not a valid int") from None
    if first_unit:
        values["first_unit_chars"] = tuple(sorted(first_unit.items()))
    for name in ("token", "publish_token"):
        token_file = values.pop(name + "_file", None)
        if name not in values and token_file is not None:
            values[name] = Path(token_file).read_text().strip()
            if not values[name]:
                raise ValueError(f"token file {token_file} is empty")
    return Config(**values)
