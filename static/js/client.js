// The page's model of an rtts session: a Connection, a Player, and one record per
// utterance with everything the page shows and the tests read (window.rtts.stats).
//
// Time to first audio is measured here, on the page's own clock, from the moment the
// request is handed to the socket: `ttfaMs` to the first `audio` frame received and
// `firstSoundMs` to the worklet starting to play it. The server's own `ttfa_ms` (from
// `end.stats`) is kept next to them for comparison.
//
// With `sync` on, the page follows the server's shared clock (clock.js) and plays a
// channel announcement that carries `play_at` at that time (docs/protocol.md, "Playing
// in step"), so every kiosk that hears it speaks as one; window.rtts.sync reports the
// clock and where each timed sample was put.

import { ClockSync } from "./clock.js";
import { Connection, wsUrl } from "./connection.js";
import { Player, decodeFrame } from "./player.js";
import { OPUS_RATE, OpusStream, opusSupported } from "./opus.js";
import { captionParts, wordAt } from "./words.js";

let counter = 0;
function newId(prefix) {
  counter += 1;
  return `${prefix}${counter}-${Math.random().toString(36).slice(2, 6)}`;
}

const SENTENCE_END = /[.!?。！？…]["'”’)\]]*$/u;
const CJK_END = /[\u3000-\u9fff\uff00-\uffef]$/u;
const CJK_START = /^[\u3000-\u9fff\uff00-\uffef]/u;

export class RttsClient extends EventTarget {
  // settings: {token, voice, lang, speed, generator, sampleRate, format, prebufferMs, words};
  // voice/lang/speed/generator go with each utterance, sampleRate, format, token and words with
  // `hello`. generator ("", "student", "teacher"): Kokoro's waveform generator, "" the server's. format "opus" is
  // used when both this browser (WebCodecs) and the server (ready.formats) can; else pcm16.
  // words (true, "word" or "char"): ask for word timing, and caption word by word.
  // sync: play timed announcements in step; outputMs: the sink's latency beyond what the
  // browser reports; clockSkewPpm (tests only): this page's clock runs fast by that much.
  constructor(settings = {}) {
    super();
    this.settings = { prebufferMs: 60, sync: false, outputMs: 0, clockSkewPpm: 0, ...settings };
    this.utterances = new Map(); // id -> record, in creation order
    this.live = new Set(); // ids the server has not ended yet
    this.last = null; // {id, rate, chunks} audio of the most recent utterance, for WAV
    this.caption = null; // {id, text, index, lang, voice} from marks; with words also {word, parts, pos}
    this._following = null; // the requestAnimationFrame that moves the word highlight
    this.clock = this.settings.sync ? new ClockSync({ skewPpm: this.settings.clockSkewPpm }) : null;
    this.player = new Player({ prebufferMs: this.settings.prebufferMs, clock: this.clock, outputMs: this.settings.outputMs });
    this.conn = new Connection({ url: settings.url || wsUrl(), hello: () => this._hello(), clock: this.clock });
    this.conn.addEventListener("message", (e) => this._onMessage(e.detail));
    this.conn.addEventListener("state", (e) => this._emit("state", e.detail));
    this.conn.addEventListener("closed", () => this._onDisconnect());
    this.player.addEventListener("status", (e) => this._onStatus(e.detail));
    this.player.addEventListener("start", (e) => this._onSoundStart(e.detail));
    this.player.addEventListener("done", (e) => this._onSoundDone(e.detail));
    this.player.addEventListener("state", () => this._emit("audiostate", { state: this.audioState }));
    this.maxRecords = 200; // an unattended page must not grow without bound
    this.opus = { browser: false, server: null }; // can each side do Opus (null: not known yet)
    this.channels = new Map(); // subscribed channel -> seq of the last announcement heard (null: none)
  }

  // Hear a channel's announcements (docs/protocol.md, "Channels"), on this connection and
  // on every reconnection; the server says how many were missed in between (`missed`).
  subscribe(channel) {
    if (!this.channels.has(channel)) this.channels.set(channel, null);
    if (this.conn.state === "ready") this._subscribe(channel);
  }

  unsubscribe(channel) {
    this.channels.delete(channel);
    this.conn.send({ type: "unsubscribe", channel });
  }

  _subscribe(channel) {
    const msg = { type: "subscribe", channel };
    const seq = this.channels.get(channel);
    if (seq !== null && seq !== undefined) msg.after = seq;
    this.conn.send(msg);
  }

  // An announcement begins: it becomes an utterance record like the page's own. A
  // high-priority one has cut what this connection was playing: drop what is queued here,
  // at once; or, when it is timed, at its start (player.cutAt), which is the same
  // instant on every kiosk.
  _announcement(msg) {
    if (msg.priority === "high") {
      this._dropLocal();
      if (!this._timed(msg)) this.player.flush();
    }
    const rec = this._record(msg.id, msg.text || "", "channel");
    Object.assign(rec, { channel: msg.channel, priority: msg.priority || "normal" });
    const seq = Number(String(msg.id).split("#").pop());
    if (Number.isInteger(seq)) this.channels.set(msg.channel, Math.max(this.channels.get(msg.channel) ?? 0, seq));
    return rec;
  }

  // A voice's name as `ready.voices` gives it; its id where the server did not list it.
  voiceName(id) {
    const ready = this.conn.ready;
    const v = ready && ready.voices.find((x) => x.id === id);
    return v ? v.name || v.id : id;
  }

  // Whether a `start` is played at its `play_at`: only with sync on, from a server that
  // offers its clock, once this page has an estimate of it. Otherwise as soon as it can.
  _timed(msg) {
    const ready = this.conn.ready;
    return typeof msg.play_at === "number" && this.clock !== null && this.clock.usable
      && Boolean(ready && ready.clock);
  }

  async start() {
    if (this.settings.format === "opus") this.opus.browser = await opusSupported();
    this.conn.connect();
  }

  // What goes on the wire: Opus only when wanted and both ends have it.
  get wireFormat() {
    const o = this.opus;
    return this.settings.format === "opus" && o.browser && o.server ? "opus" : "pcm16";
  }

  get audioState() {
    return this.player.ctx ? this.player.ctx.state : "closed";
  }

  // Applies new settings; a new sample rate or token needs a new `hello`.
  configure(changes) {
    const rehello = ("sampleRate" in changes && changes.sampleRate !== this.settings.sampleRate)
      || ("token" in changes && changes.token !== this.settings.token)
      || ("words" in changes && changes.words !== this.settings.words);
    Object.assign(this.settings, changes);
    if (rehello) this.conn.rehello();
  }

  _hello() {
    const s = this.settings;
    const format = this.wireFormat;
    const msg = { format, frame_ms: 20 };
    if (s.token) msg.token = s.token;
    if (s.words) msg.words = s.words; // left out when off: the `hello` of before
    if (format === "opus") msg.sample_rate = OPUS_RATE;
    else if (s.sampleRate) msg.sample_rate = Number(s.sampleRate);
    return msg;
  }

  _voiceFields() {
    const s = this.settings;
    const out = {};
    if (s.voice) out.voice = s.voice;
    if (s.lang) out.lang = s.lang;
    if (s.speed && Number(s.speed) !== 1) out.speed = Number(s.speed);
    if (s.generator) out.generator = s.generator;
    return out;
  }

  _record(id, text, mode) {
    const rec = {
      id, text, mode, sentAt: performance.now(), flushAt: null,
      started: false, voice: null, voices: [], marks: [], words: [], cps: null, firstPts: null, sent: 0, received: 0, played: 0,
      ttfaMs: null, firstSoundMs: null, serverTtfaMs: null, firstFrameAt: null, expectedWaitMs: null,
      expectedAudioMs: null,
      reason: null, stats: null, error: null, cancelled: false, stopMs: null, playAt: null, lateMs: null,
    };
    this.utterances.set(id, rec);
    this.live.add(id);
    while (this.utterances.size > this.maxRecords) {
      const oldest = this.utterances.keys().next().value;
      if (this.live.has(oldest)) break;
      this.utterances.delete(oldest);
    }
    return rec;
  }

  // One whole utterance. Returns its id, or null when not connected.
  speak(text, { interrupt = false, id = newId("u") } = {}) {
    if (this.conn.state !== "ready") return null;
    if (interrupt) {
      this._dropLocal(); // the server cancels them; do not play what is queued here
      this.player.flush();
    }
    const rec = this._record(id, text, "speak");
    const msg = { type: "speak", id, text, ...this._voiceFields() };
    if (interrupt) msg.interrupt = true;
    rec.sentAt = performance.now();
    this.conn.send(msg);
    this._emit("utterance", rec);
    return id;
  }

  // Type-along: `append` creates the utterance on first use; `flush` finishes it.
  append(id, text) {
    if (!text || this.conn.state !== "ready") return false;
    let rec = this.utterances.get(id);
    if (rec && !this.live.has(id)) return false; // it ended (an error, a lost server): start anew
    const msg = { type: "append", id, text };
    if (!rec) {
      rec = this._record(id, "", "typed");
      Object.assign(msg, this._voiceFields());
    }
    rec.text += text;
    this.conn.send(msg);
    this._emit("utterance", rec);
    return true;
  }

  flush(id) {
    const rec = this.utterances.get(id);
    if (!rec || !this.live.has(id)) return false;
    rec.flushAt = performance.now();
    this.conn.send({ type: "flush", id });
    return true;
  }

  newTypingId() {
    return newId("t");
  }

  // Stop: `cancel` everything on the server and silence the worklet now, without waiting
  // for the server's `end`s. Resolves with the milliseconds until the output was silent.
  async stop() {
    const t0 = performance.now();
    const ids = this._dropLocal();
    this.conn.send({ type: "cancel" });
    await this.player.flush();
    const ms = performance.now() - t0;
    for (const id of ids) this.utterances.get(id).stopMs = ms;
    this.lastStopMs = ms;
    this._setCaption(null);
    this._emit("stopped", { ms, ids });
    return ms;
  }

  _dropLocal() {
    const ids = [...this.live];
    for (const id of ids) this.utterances.get(id).cancelled = true;
    return ids;
  }

  _onMessage(msg) {
    const rec = msg.id !== undefined ? this.utterances.get(msg.id) : undefined;
    switch (msg.type) {
      case "ready":
        if (this.settings.format === "opus" && this.opus.browser && this.opus.server === null) {
          // The first `ready` says whether this server can send Opus; ask for it if so.
          this.opus.server = (msg.formats || []).includes("opus");
          if (this.opus.server) {
            this.conn.rehello();
            break;
          }
        }
        this.player.open(msg.sample_rate).catch((err) => this._emit("error", { code: "audio", message: String(err) }));
        this._emit("ready", msg);
        for (const channel of this.channels.keys()) this._subscribe(channel);
        break;
      case "subscribed":
        if (this.channels.has(msg.channel) && this.channels.get(msg.channel) === null) {
          this.channels.set(msg.channel, msg.seq); // count what is missed from here on
        }
        this._emit("subscribed", msg);
        break;
      case "start": {
        const announced = !rec && msg.channel ? this._announcement(msg) : null;
        if (announced) {
          this._emit("announcement", announced);
          this._onMessage(msg); // now as the start of a known utterance
          break;
        }
        if (rec) {
          Object.assign(rec, { started: true, voice: msg.voice, format: msg.format, rate: msg.sample_rate });
          if (msg.voice && !rec.voices.includes(msg.voice)) rec.voices.unshift(msg.voice);
          if (msg.format === "opus") {
            rec.opus = new OpusStream(msg.sample_rate, (samples) => this._onSamples(rec, samples),
              (err) => this._onOpusError(rec, err));
          }
          rec.expectedWaitMs = msg.expected_wait_ms ?? null;
          // When its first audio should come (issue 32); an older server says only the wait.
          rec.expectedAudioMs = msg.expected_audio_ms ?? rec.expectedWaitMs;
          rec.queued = msg.queued === true; // waiting for room on the server (issue 32)
          if (rec.playAt === null && this._timed(msg)) {
            // Before any of its audio: the worklet plays a chunk as it comes unless it
            // knows the chunk's utterance has a time.
            rec.playAt = msg.play_at;
            rec.lateMs = 0;
            this.player.timeline(rec.id, msg.play_at);
            if (rec.priority === "high") this.player.cutAt(rec.id);
          }
          this._emit("start", rec);
        }
        break;
      }
      case "audio":
        if (rec) this._onAudio(rec, msg);
        break;
      case "mark":
        if (rec) {
          rec.marks.push({ pts: msg.pts, text: msg.text, lang: msg.lang, voice: msg.voice });
          if (msg.voice && !rec.voices.includes(msg.voice)) rec.voices.push(msg.voice);
        }
        break;
      case "words":
        if (rec) {
          for (const w of msg.words) rec.words.push(w);
          this._emit("words", { id: rec.id, words: msg.words });
        }
        break;
      case "end":
        if (rec) {
          const finish = () => {
            rec.reason = msg.reason;
            rec.stats = msg.stats || null;
            if (rec.stats && rec.stats.ttfa_ms >= 0) rec.serverTtfaMs = rec.stats.ttfa_ms;
            this.live.delete(msg.id);
            if (!rec.cancelled) this.player.end(msg.id);
            else this.player.forget(msg.id);
            this._emit("end", rec);
          };
          if (rec.opus) {
            // The decoder may still hold the last packets: the utterance ends once they are out.
            const opus = rec.opus;
            rec.opus = null;
            opus.finish().catch(() => {}).then(finish);
          } else {
            finish();
          }
        }
        break;
      case "error":
        if (!rec && this.wireFormat === "opus" && msg.code === "bad_message" && /opus/.test(msg.message)) {
          // This server took `ready.formats` back (a restart without PyAV): plain PCM then.
          this.opus.server = false;
          this.conn.rehello();
        }
        if (rec) {
          rec.error = { code: msg.code, message: msg.message };
          if (!rec.started && this.live.has(rec.id)) {
            // Refused before it started (bad request, or `busy` under admission
            // control): no `end` will follow, so end it here.
            rec.reason = "refused";
            this.live.delete(rec.id);
            this._emit("end", rec);
          }
        }
        this._emit("error", msg);
        break;
    }
  }

  _onAudio(rec, msg) {
    rec.bytes = (rec.bytes || 0) + msg.data.length;
    if (rec.firstPts === null) rec.firstPts = msg.pts || 0; // a subscriber may join an announcement late
    if (rec.firstFrameAt === null) {
      rec.firstFrameAt = performance.now();
      rec.ttfaMs = rec.firstFrameAt - rec.sentAt;
      this.last = { id: rec.id, rate: rec.rate || this.conn.ready.sample_rate, chunks: [] };
      this._emit("firstaudio", rec);
    }
    if (rec.opus) rec.opus.decode(msg.data, msg.pts);
    else this._onSamples(rec, decodeFrame(msg.data, rec.format || this.conn.ready.format));
  }

  _onOpusError(rec, err) {
    // A browser whose decoder fails goes back to pcm16 for the next utterances.
    this.opus.browser = false;
    this.conn.rehello();
    this._emit("error", { id: rec.id, code: "opus", message: String(err) });
  }

  _onSamples(rec, samples) {
    // Its place on the utterance's timeline: the pts of its first sample. Decoded Opus
    // keeps pts (opus.js trims the pre-skip), so this holds for every format.
    const pos = rec.playAt !== null ? rec.firstPts + rec.sent : undefined;
    rec.sent += samples.length;
    if (this.last && this.last.id === rec.id) this.last.chunks.push(samples.slice());
    // Frames still in flight after Stop or an interrupt are dropped here, so they can
    // never reach the speakers.
    if (!rec.cancelled) this.player.push(rec.id, samples, pos);
  }

  _onDisconnect() {
    // Whatever was under way is gone with the server; let the worklet play out what it
    // already has instead of waiting for frames that will not come.
    for (const id of this.live) {
      const rec = this.utterances.get(id);
      if (rec.opus) rec.opus.close();
      rec.opus = null;
      rec.reason = "disconnected";
      this.player.end(id);
      this._emit("end", rec);
    }
    this.live.clear();
  }

  _onStatus(st) {
    for (const [id] of st.placed || []) this._noteLate(id);
    for (const [id, n] of Object.entries(st.received)) {
      const rec = this.utterances.get(id);
      if (rec) rec.received = n;
    }
    if (st.id !== null) {
      const rec = this.utterances.get(st.id);
      if (rec) {
        rec.played = st.pos;
        if (rec.words.length) this._followWords();
        else this._updateCaption(rec, st.pos);
      }
    }
    this._emit("status", st);
  }

  // How much of a timed utterance came too late to be played (its start, or what an
  // underrun left behind: the rest joins at position), from where its samples were put.
  _noteLate(id, samples = this.player.lateSamples(id)) {
    const rec = this.utterances.get(id);
    if (rec && rec.playAt !== null && samples !== null) rec.lateMs = (samples / this.player.sampleRate) * 1000;
  }

  _onSoundStart({ id }) {
    const rec = this.utterances.get(id);
    if (rec && rec.firstSoundMs === null) rec.firstSoundMs = performance.now() - rec.sentAt;
  }

  _onSoundDone({ id, received, played, flushed, lateSamples }) {
    if (lateSamples !== undefined) this._noteLate(id, lateSamples);
    const rec = this.utterances.get(id);
    if (rec) {
      rec.received = Math.max(rec.received, received);
      rec.played = played;
      rec.soundDone = true;
      rec.cps = null; // the caption's copy of the text; an unattended page keeps 200 records
    }
    if (this.caption && this.caption.id === id) this._setCaption(null);
    this._emit("sounddone", { id, flushed: Boolean(flushed) });
  }

  // The caption is the sentence of the last `mark` whose audio has started playing. The
  // server cuts the first sentence short so sound starts early, so a mark can continue the
  // sentence of the one before it: join marks back to the previous sentence end.
  _updateCaption(rec, pos) {
    let index = -1;
    for (let i = 0; i < rec.marks.length; i++) if (rec.marks[i].pts <= pos) index = i;
    if (index < 0) return;
    if (this.caption && this.caption.id === rec.id && this.caption.index === index) return;
    let first = index;
    while (first > 0 && !SENTENCE_END.test(rec.marks[first - 1].text)) first--;
    let text = "";
    const langs = [];
    for (let i = first; i <= index; i++) {
      const part = rec.marks[i].text;
      text += text && !CJK_END.test(text) && !CJK_START.test(part) ? " " + part : part;
      langs.push(rec.marks[i].lang);
    }
    // The caption's language, for the pages' lang attribute: the browser draws Han
    // characters in Japanese or Chinese forms by it. A sentence with any Japanese is Japanese.
    const lang = langs.includes("ja") ? "ja" : langs.includes("zh") ? "zh" : langs[0] || null;
    const voice = rec.marks[index].voice || rec.voice;
    this._setCaption({ id: rec.id, index, text, lang, voice, pts: rec.marks[index].pts });
  }

  // With words, the caption follows the word being heard, from the position the player
  // says the listener is at (not its last status, ~40 ms old), once per animation frame
  // while a worded utterance plays; hidden pages get no frames but still get statuses.
  _followWords() {
    this._wordCaption();
    if (this._following === null && typeof requestAnimationFrame === "function") {
      this._following = requestAnimationFrame(() => {
        this._following = null;
        const st = this.player.status;
        const rec = st.id !== null ? this.utterances.get(st.id) : undefined;
        if (rec && rec.words.length) this._followWords();
      });
    }
  }

  _wordCaption() {
    const id = this.player.status.id;
    const rec = id !== null ? this.utterances.get(id) : undefined;
    // The worklet's `done` may come before its next status, and Stop before either: the
    // caption is over then.
    if (!rec || rec.soundDone || rec.cancelled) return;
    const heard = this.player.heard(id);
    if (heard === null) return;
    const c = this.caption;
    // On the utterance's pts clock, as the words are. Never back: the estimate follows the
    // output timestamp, which a busy page dates late (it went back a word in the suite),
    // and what was heard of an utterance was heard.
    let pos = heard + (rec.firstPts || 0);
    if (c && c.id === rec.id && c.pos > pos) pos = c.pos;
    const word = wordAt(rec.words, pos);
    if (!(c && c.id === rec.id && c.word === word && c.wordCount === rec.words.length && c.textLength === rec.text.length)) {
      // The text of an appended utterance grows; a new words message may end the sentence.
      if (!rec.cps || rec.cps.length !== Array.from(rec.text).length) rec.cps = Array.from(rec.text);
      const cap = captionParts(rec.cps, rec.words, word);
      const at = rec.words[Math.max(word, 0)].start;
      let lang = null;
      let voice = rec.voice;
      for (const m of rec.marks) {
        if (m.pts <= at) {
          lang = m.lang;
          voice = m.voice || rec.voice;
        }
      }
      this._setCaption({
        id: rec.id, text: cap.parts.map((p) => p.text).join(""), lang, voice, index: null, pts: at,
        word, words: rec.words, parts: cap.parts, start: cap.start, end: cap.end, pos,
        wordCount: rec.words.length, textLength: rec.text.length,
      });
    }
    this.caption.pos = pos;
    this.caption.heardAt = performance.now(); // when `pos` was so (the tests allow for the time since)
    this._emit("heard", { id: rec.id, pos, word });
  }

  _setCaption(caption) {
    this.caption = caption;
    this._emit("caption", caption);
  }

  // A plain snapshot for tests and the figures panel.
  get stats() {
    const utterances = {};
    for (const [id, r] of this.utterances) {
      utterances[id] = {
        mode: r.mode, text: r.text, sent: r.sent, received: r.received, played: r.played,
        ttfaMs: r.ttfaMs, firstSoundMs: r.firstSoundMs, serverTtfaMs: r.serverTtfaMs,
        reason: r.reason, stats: r.stats, error: r.error, stopMs: r.stopMs, format: r.format ?? null, bytes: r.bytes ?? 0,
        marks: r.marks.length, firstFrameAt: r.firstFrameAt, flushAt: r.flushAt, expectedWaitMs: r.expectedWaitMs,
        expectedAudioMs: r.expectedAudioMs, soundDone: Boolean(r.soundDone),
        channel: r.channel ?? null, priority: r.priority ?? null, words: r.words.length, voices: r.voices,
        playAt: r.playAt, lateMs: r.lateMs,
      };
    }
    const st = this.player.status;
    return {
      state: this.conn.state, audio: this.audioState, sampleRate: this.player.sampleRate, wireFormat: this.wireFormat,
      bufferedMs: this.player.bufferedMs(), underruns: st.underruns, audibleUnderruns: st.audibleUnderruns,
      starvedMs: this.player.sampleRate
        ? (st.starved / this.player.sampleRate) * 1000 : 0,
      caption: this.caption ? this.caption.text : null, lastStopMs: this.lastStopMs ?? null,
      utterances,
    };
  }

  // Playing in step, for tests and the benchmark: the clock estimate, and per timed
  // utterance (the last 8) rows [pos, sharedS, trueS, frame]: sample `pos` was meant to be
  // heard at shared-clock second sharedS and is output at trueS, Unix seconds by this
  // page's own clock (timeOrigin + performance.now(), the same on every page of a host),
  // written to context frame `frame`. The
  // worklet's counters of late samples and corrections come with them.
  get sync() {
    const st = this.player.status;
    return {
      clock: this.clock ? this.clock.stats : null,
      placed: this.player.placed,
      late: st.late ?? 0, softDrops: st.softDrops ?? 0, softDups: st.softDups ?? 0, hardSyncs: st.hardSyncs ?? 0,
    };
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}

// Polls /readyz: which models are loaded or loading right now, plus load on the server.
// Returns {now(), stop()}: now() polls at once (say, when an utterance starts, which
// is when a model has just loaded).
export function watchReadyz(callback, everyMs = 2000) {
  let stopped = false;
  let timer = null;
  async function tick() {
    clearTimeout(timer);
    if (stopped) return;
    try {
      const r = await fetch("/readyz", { cache: "no-store" });
      callback(await r.json(), null);
    } catch (err) {
      callback(null, err);
    }
    timer = setTimeout(tick, everyMs);
  }
  tick();
  return { now: tick, stop: () => { stopped = true; clearTimeout(timer); } };
}
