// Main-thread side of playback: one AudioContext running at the session's sample rate
// (so `pts` and sample counts mean the same thing on both ends) and the worklet node.
//
// Playing in step (docs/protocol.md, "Playing in step"): an utterance given a timeline
// (`play_at`, on the server's shared clock) is scheduled by the worklet against a mapping
// from context frames to shared-clock time that this side keeps up to date: a `clock`
// message every 250 ms, {frame F, shared: when F is heard, r: frames per shared second}.
//
// What the output timestamp means, measured in Debian's headless Chromium 156 at
// 24 kHz (issue 24, step 0: 10 s of getOutputTimestamp() with a worklet playing):
// - contextTime advances at sr frames per performanceTime second: the line through
//   (performanceTime, contextTime) has slope 1 + 1.5e-6, residuals under 0.26 ms. On a
//   real device the two can drift apart; the mapping's rate r is fitted, not assumed.
// - currentTime - contextTime = 42.8 ms (median) while baseLatency + outputLatency =
//   10.0 + 32.0 = 42.0 ms: contextTime is the frame being heard at performanceTime, the
//   output latency already in it. So (contextTime, performanceTime) is used as it is, and
//   the latencies are added only on the fallback, currentTime (the frame about to be
//   rendered) at performance.now(); that fallback is ~5 ms coarser (currentTime moves in
//   steps of the device's ~10 ms callback).
// - performanceTime trails performance.now() by 0-10 ms (it is renewed once a callback).
// - The first timestamps of a context that has just started are off: 7-13 ms, once
//   257 ms, in the first 50 ms of output; after that they sit on one line. So the mapping
//   starts once the context has played WARMUP_S.
// - After 30 s of output that is exactly zero, Chromium hands the context from the
//   device to a timer (its SilentSinkSuspender), and back at the first sample that is
//   not: the output timestamps step at each hand-over (benchmarks/silent_sink.py: -9.1 ms
//   at 30.0 s of silence, -3.3 ms as sound came back; none kept awake). A kiosk is silent for
//   minutes between announcements, so every announcement began off by that step and
//   made it up in its first second. A player in step keeps its output awake with a
//   constant KEEP_AWAKE: not zero to the suspender, which tests the float samples, and
//   zero on the device (under half the least step of a 24-bit output).

const WORKLET_URL = new URL("./worklet.js", import.meta.url);
const QUANTUM = 128; // samples an AudioWorklet renders per call
const TICK_MS = 250;
const WARMUP_S = 0.5;
const RATE_WINDOW_S = 60; // the mapping's rate is fitted over this much history...
const RATE_MIN_SPAN_S = 10; // ...once there is this much (the nominal rate before)
const RATE_MAX_PPM = 1000;
const STEP_S = 0.002; // neighbours further apart than this, beyond the rate: a step
const SLEW_S = 0.002; // the mapped time moves at most this much per tick...
const HARD_S = 0.015; // ...unless it is off by more than this, when it jumps (hard sync)
const PLACED_UTTERANCES = 8; // placements kept for window.rtts.sync
// A row is a chunk's first sample or a correction: a minute of speech on a loaded box made
// 4,000 of them in 58.5 s (a CI run whose page stopped recording short of 60 s). 16,000
// rows keep ~4 minutes of such speech, for ~1 MB an utterance.
const PLACED_ROWS = 16000;
const KEEP_AWAKE = 2 ** -26; // -156 dBFS
const READINGS = 3; // output timestamps the output line is the median of...
const READINGS_S = 1; // ...within this long of the newest (what is older is from before a silence)

export function decodeFrame(data, format) {
  // msgpack hands back a view into the message buffer that may sit at an odd offset;
  // a typed array over it needs aligned memory, hence the copy.
  const bytes = data.slice();
  if (format === "f32") return new Float32Array(bytes.buffer);
  if (format === "mulaw") return Float32Array.from(bytes, mulawToFloat);
  const pcm = new Int16Array(bytes.buffer);
  const out = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) out[i] = pcm[i] / 32768;
  return out;
}

function mulawToFloat(u) {
  u = ~u & 0xff;
  const sign = u & 0x80 ? -1 : 1;
  const exponent = (u >> 4) & 0x07;
  const mantissa = u & 0x0f;
  return (sign * (((mantissa << 3) + 0x84) << exponent) - sign * 0x84) / 32768;
}

export class Player extends EventTarget {
  // clock: the page's ClockSync, for timed utterances (null: none are). outputMs: latency
  // of the sink beyond what the browser reports (HDMI, Bluetooth), added to every timestamp.
  constructor({ prebufferMs = 60, clock = null, outputMs = 0 } = {}) {
    super();
    this.prebufferMs = prebufferMs;
    this.clock = clock;
    this.outputMs = outputMs;
    this.timed = new Map(); // id -> samples pushed, for ids given a timeline and not done yet
    this.placed = new Map(); // id -> [[pos, sharedS, trueS, frame], ...]: where timed samples were put
    this.mapping = null; // the last `clock` posted: {frame, shared, r}
    this._mappings = []; // recent ones, with the frame rendered when each was posted
    this._history = []; // [[frame, perf]]: output timestamps, for the rate
    this._readings = []; // [[performanceTime, perf - frame time]]: the last few distinct output timestamps
    this._heardReadings = []; // the same for heard(): its readings come per animation frame, not per status
    this._ticker = null;
    // id -> {first, end: pos of its first and past its last sample, rows: [[pos, frame]]
    // (the last few placed), chunks: [{pos, len, first: pos of its first sample placed}]}
    this._runs = new Map();
    this.ctx = null;
    this.node = null;
    this.sampleRate = 0;
    this.status = { buffered: 0, playing: false, id: null, pos: 0, underruns: 0, audibleUnderruns: 0, starved: 0 };
    this._flushWaiters = [];
    this._opening = null;
    this._wanted = 0; // the rate of the last open(): messages wait for that context
    this._pending = []; // messages for a worklet still being created, or awaiting a mapping
  }

  // Creates (or re-creates, when the rate changed) the context. Safe to call often.
  async open(sampleRate) {
    this._wanted = sampleRate;
    if (this.ctx && this.sampleRate === sampleRate) return;
    if (this._opening) await this._opening;
    if (this.ctx && this.sampleRate === sampleRate) return;
    this._opening = this._open(sampleRate);
    try {
      await this._opening;
    } finally {
      this._opening = null;
    }
  }

  async _open(sampleRate) {
    const old = this.ctx;
    this.ctx = null;
    this.node = null;
    if (old) await old.close();
    const ctx = new AudioContext({ sampleRate, latencyHint: "interactive" });
    await ctx.audioWorklet.addModule(WORKLET_URL);
    const node = new AudioWorkletNode(ctx, "rtts-player", {
      numberOfInputs: 0,
      outputChannelCount: [1],
      processorOptions: { prebuffer: Math.round((sampleRate * this.prebufferMs) / 1000) },
    });
    node.port.onmessage = (e) => this._onMessage(e.data);
    node.connect(ctx.destination);
    if (this.clock) {
      const awake = new ConstantSourceNode(ctx, { offset: KEEP_AWAKE });
      awake.connect(ctx.destination);
      awake.start();
    }
    ctx.onstatechange = () => this._emit("state", { state: ctx.state });
    this.ctx = ctx;
    this.node = node;
    this.sampleRate = sampleRate;
    // Frames count from 0 again in a new context: what was measured in the old one is void.
    this.mapping = null;
    this._mappings = [];
    this._history = [];
    this._readings = [];
    this._heardReadings = [];
    this._release();
    this._emit("state", { state: ctx.state });
  }

  get running() {
    return this.ctx !== null && this.ctx.state === "running";
  }

  // Browsers start audio only after a user gesture (unless told otherwise, as a kiosk is).
  async resume() {
    if (this.ctx && this.ctx.state === "suspended") await this.ctx.resume();
  }

  // pos: the utterance's sample index of samples[0] (its pts), for a timed utterance;
  // left out, the chunk plays as soon as it can, as always.
  push(id, samples, pos) {
    const msg = { type: "audio", id, samples };
    if (pos !== undefined) msg.pos = pos;
    if (this.timed.has(id)) {
      this.timed.set(id, this.timed.get(id) + samples.length);
      if (pos !== undefined) {
        const run = this._runs.get(id) || { first: pos, end: pos, rows: [], chunks: [], placedUpTo: -1 };
        run.end = Math.max(run.end, pos + samples.length);
        run.chunks.push({ pos, len: samples.length, first: null });
        this._runs.set(id, run);
      }
    }
    this._post(msg, [samples.buffer]);
  }

  // Utterance `id` is heard from shared-clock time `playAt` (its pos 0); before its audio.
  // (In a context's first WARMUP_S there is no mapping yet: messages wait for it.)
  timeline(id, playAt) {
    this.timed.set(id, 0);
    this._post({ type: "timeline", id, playAt }, []);
    this._clockTick();
    if (this._ticker === null) this._ticker = setInterval(() => this._clockTick(), TICK_MS);
  }

  // A high-priority timed utterance: what plays before it goes on until its start, and
  // is cut there (on every kiosk at the same instant), rather than at once by flush().
  cutAt(id) {
    this._post({ type: "cutAt", id }, []);
  }

  end(id) {
    this._post({ type: "end", id }, []);
    // The worklet reports `done` only for what it got: with nothing, this is the end.
    if (this.timed.get(id) === 0) this.forget(id);
  }

  // No more ticks for `id` (an utterance that ends cancelled, with nothing more to play).
  forget(id) {
    this._untime([id]);
  }

  _post(msg, transfer) {
    if (this._canPost()) this.node.port.postMessage(msg, transfer);
    else this._pending.push([msg, transfer]);
  }

  // Messages wait for a worklet of the rate last asked for: another may have been asked
  // for while this one opened (a first `ready` at 24 kHz, then Opus's at 48 kHz), and
  // what came meanwhile is for that context, which replaces this one (closing it would
  // lose it). They also wait, while a timed utterance is queued, for the first mapping
  // of this context (WARMUP_S): the worklet decides whether an utterance plays timed as
  // it reaches the head of its queue, and without a mapping it would play it at once.
  _canPost() {
    return this.node !== null && this.sampleRate === this._wanted && !(this.timed.size && this.mapping === null);
  }

  _release() {
    if (!this._canPost()) return;
    for (const [msg, transfer] of this._pending.splice(0)) this.node.port.postMessage(msg, transfer);
  }

  // Drops everything queued; resolves once the worklet's output is silent.
  flush() {
    this._pending = [];
    this._untime([...this.timed.keys()]);
    if (!this.node) return Promise.resolve({ dropped: 0 });
    this.node.port.postMessage({ type: "flush" });
    // A suspended context renders nothing, so it is silent already; the flag is applied
    // before its next render.
    if (!this.running) return Promise.resolve({ dropped: 0 });
    return new Promise((resolve) => this._flushWaiters.push(resolve));
  }

  // How many samples of utterance `id` have reached the listener, now: what the worklet
  // had played at its last status, moved on by the frames rendered since (statuses come
  // every ~40 ms, a word lasts a few hundred), less the output's latency and the trim.
  // The context's output timestamps say which frame the device plays when, latency
  // included, read as the timeline reads them (_outputNow: the median of the last few,
  // since one dated late, by 25 ms on CI's loaded box, put the highlight that far
  // behind); where the browser gives none, currentTime less the latencies it reports.
  // null when `id` is not what the worklet is playing.
  heard(id) {
    const st = this.status;
    const ctx = this.ctx;
    if (!ctx || st.id !== id || st.frame === undefined) return null;
    const run = this._runs.get(id);
    if (run) return this._heardOnTimeline(run);
    // Its own readings: the kiosk's clock ticks and placements keep theirs at their pace.
    const out = this._outputNow(this._heardReadings);
    // Never past what has been rendered (currentTime): after a slip (the output fell
    // behind, a callback missed on a loaded box) the median keeps the mapping from before
    // it for a reading, ahead by the slip (the kiosk highlight test, in a whole suite,
    // read 32 ms ahead of its worklet so).
    const now = Math.min(out.frame + ((performance.now() - out.perf) / 1000) * this.sampleRate, ctx.currentTime * this.sampleRate);
    // The status's `pos` counts the quantum that began at its `frame`; at most what was
    // queued then can have played since, and nothing while the worklet waits to refill.
    const ahead = Math.min(now - (st.frame + QUANTUM), st.playing ? st.buffered : 0);
    return Math.max(0, Math.round(st.pos + ahead));
  }

  // A timed utterance is not where its count of samples played says: what came late was
  // dropped, and corrections drop or double a sample. The frame being heard now, from
  // the last run placed at or before it (a run plays its samples one a frame), says
  // which sample of it that is; no further than what has come, and null before its
  // first is heard.
  _heardOnTimeline(run) {
    const out = this._outputNow();
    const now = out.frame + ((performance.now() - out.perf) / 1000) * this.sampleRate;
    let row = null; // none while it waits for its time (the worklet's current all the same)
    for (const r of run.rows) if (r[1] <= now) row = r;
    if (row === null) return null; // its first sample is not out yet
    return Math.max(0, Math.round(Math.min(row[0] + (now - row[1]), run.end) - run.first));
  }

  // Samples of timed utterance `id` dropped because their time had passed: of each chunk
  // up to the last one placed, those before its first sample placed (all of one never
  // placed). null for an utterance not timed.
  lateSamples(id) {
    const run = this._runs.get(id);
    if (!run) return null;
    let late = 0;
    for (let i = 0; i < run.chunks.length && i < run.placedUpTo; i++) {
      const c = run.chunks[i];
      late += c.first === null ? c.len : c.first - c.pos;
    }
    const current = run.chunks[run.placedUpTo];
    if (current && current.first !== null) late += current.first - current.pos;
    return late;
  }

  bufferedMs() {
    return this.sampleRate ? (this.status.buffered / this.sampleRate) * 1000 : 0;
  }

  _onMessage(msg) {
    if (msg.type === "status") {
      if (msg.placed && msg.placed.length) this._place(msg.placed);
      this.status = msg;
      this._emit("status", msg);
    } else if (msg.type === "flushed") {
      for (const resolve of this._flushWaiters.splice(0)) resolve(msg);
    } else {
      if (msg.type === "done") {
        // (The rows of its last chunks come with the next status, after this: those
        // chunks are not counted, late or not.)
        const late = this.lateSamples(msg.id);
        this._untime([msg.id]);
        if (late !== null) msg = { ...msg, lateSamples: late };
      }
      this._emit(msg.type, msg); // start, done
    }
  }

  _untime(ids) {
    for (const id of ids) {
      this.timed.delete(id);
      this._runs.delete(id);
    }
    if (!this.timed.size && this._ticker !== null) {
      clearInterval(this._ticker);
      this._ticker = null;
    }
    this._release();
  }

  // Which context frame is heard when, on the page's performance.now() clock, by the
  // output timestamps where there are any (see the top of this file), plus the trim.
  // A loaded box's timestamp is now and then a callback late and back at the next (its
  // callback ran late, not its output: 2-8 ms, one reading in 20 ms, with the host's CPUs
  // held up for 10-50 ms at a time), while a callback the output missed moves every later
  // one (a slip of 10 ms or more): so a frame's time is the newest frame's by the median
  // offset of the last READINGS distinct timestamps within READINGS_S. A single odd
  // reading moves neither the mapping nor what the page reports; a slip is followed from
  // the second reading that shows it (~40 ms while a timed utterance plays: every status
  // reads one; 250 ms while one waits for its time, when only the clock ticks read, which
  // is why the window is 1 s: within 0.5 s a tick had two, and one odd one moved it by
  // half). (Five readings followed slips too slowly where the host was held up every
  // ~0.5 s: benchmarks.md, "Kiosks on a box held up".)
  _outputNow(readings = this._readings) {
    const ctx = this.ctx;
    const rate = this.sampleRate;
    const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : null;
    if (ts && ts.contextTime > 0 && ts.performanceTime > 0) {
      const offset = outputOffset(readings, ts.performanceTime, ts.performanceTime - ts.contextTime * 1000);
      return { frame: ts.contextTime * rate, perf: ts.contextTime * 1000 + offset + this.outputMs, stamped: true };
    }
    const latency = (ctx.baseLatency || 0) + (ctx.outputLatency || 0);
    return { frame: ctx.currentTime * rate, perf: performance.now() + latency * 1000 + this.outputMs, stamped: false };
  }

  // One `clock` message: the frame heard now and when that is on the shared clock, the
  // rate fitted to the history, and the time moved towards the measurement by at most
  // SLEW_S, so that a new clock sample (or a jittery timestamp) shifts playback by a
  // soft correction; a bigger error (a context that was suspended) is taken at once.
  _clockTick() {
    const ctx = this.ctx;
    const clock = this.clock;
    // A context being replaced, or one not running (suspended: its frames stand still),
    // gets none; nor does a page without an estimate yet (a new connection's burst).
    if (!ctx || !this.node || this.sampleRate !== this._wanted || ctx.state !== "running") return;
    if (!clock || !clock.usable || ctx.currentTime < WARMUP_S) return;
    const out = this._outputNow();
    const measured = clock.sharedS(out.perf);
    // The history keeps output timestamps, and maps them by the clock estimate of now: a
    // new estimate (a step of a few ms, or another server after a reconnection) then
    // shifts the whole line instead of bending its slope for a minute.
    // The fallback's frames (no timestamp) are too coarse to fit a rate to.
    const history = this._history;
    if (out.stamped) history.push([out.frame, out.perf]);
    while (history.length && history[0][1] < out.perf - RATE_WINDOW_S * 1000) history.shift();
    const r = fitRate(history.map(([frame, perf]) => [frame, clock.sharedS(perf)]), this.sampleRate);
    let shared = measured;
    const prev = this.mapping;
    if (prev) {
      const predicted = prev.shared + (out.frame - prev.frame) / prev.r;
      const error = measured - predicted;
      if (Math.abs(error) <= HARD_S) shared = predicted + Math.max(-SLEW_S, Math.min(SLEW_S, error));
    }
    const mapping = { type: "clock", frame: out.frame, shared, r };
    this.node.port.postMessage(mapping);
    this.mapping = mapping;
    this._release();
    this._mappings.push({ ...mapping, at: ctx.currentTime * this.sampleRate });
    if (this._mappings.length > 8) this._mappings.shift();
  }

  // The worklet's placements [id, pos, frame] (frame: the context frame the sample was
  // written to) as [pos, sharedS, trueS, frame]: when the page meant it to be heard, by
  // the mapping the worklet had, and when it is output by the page's own clock in Unix
  // seconds (timeOrigin + performance.now(): one clock for every page on a host, so
  // tests can compare pages without trusting any page's estimate).
  _place(rows) {
    if (!this._mappings.length || !this.ctx) return;
    const rate = this.sampleRate;
    const out = this._outputNow();
    for (const [id, pos, frame] of rows) {
      const run = this._runs.get(id);
      if (run) {
        run.rows.push([pos, frame]);
        if (run.rows.length > 16) run.rows.shift();
        notePlaced(run, pos);
      }
      const m = this._mappingAt(frame);
      const sharedS = m.shared + (frame - m.frame) / m.r;
      const trueS = (performance.timeOrigin + out.perf + ((frame - out.frame) / rate) * 1000) / 1000;
      let list = this.placed.get(id);
      if (!list) {
        list = [];
        this.placed.set(id, list);
        while (this.placed.size > PLACED_UTTERANCES) this.placed.delete(this.placed.keys().next().value);
      }
      if (list.length < PLACED_ROWS) list.push([pos, sharedS, trueS, frame]);
    }
  }

  // The last mapping posted before `frame` was rendered (the worklet applies each as it
  // arrives, some ~10 ms after it is posted; rows are reported within ~40 ms).
  _mappingAt(frame) {
    let m = this._mappings[0];
    for (const x of this._mappings) if (x.at <= frame) m = x;
    return m;
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}

// Context frames per shared-clock second: the least-squares slope of frame over shared
// time, within RATE_MAX_PPM of the nominal rate, and the nominal rate until the history
// spans RATE_MIN_SPAN_S (a short line would follow the timestamps' jitter). Where two
// neighbours are more than STEP_S apart from the nominal rate, the output stepped (a
// callback missed on a loaded box, a new device): one line through the step would tilt
// by the step over the span (10 ms in 10 s is 1000 ppm), so each stretch between steps
// keeps its own intercept and they share the slope.
export function fitRate(history, rate) {
  const stretches = [[]];
  for (const point of history) {
    const stretch = stretches[stretches.length - 1];
    const prev = stretch[stretch.length - 1];
    if (prev && Math.abs((point[0] - prev[0]) / rate - (point[1] - prev[1])) > STEP_S) stretches.push([point]);
    else stretch.push(point);
  }
  let span = 0;
  let sfs = 0;
  let sss = 0;
  for (const stretch of stretches.filter((x) => x.length >= 2)) {
    span += stretch[stretch.length - 1][1] - stretch[0][1];
    const [f0, s0] = stretch[0]; // relative to the first: Unix seconds would swamp the sums
    let mf = 0;
    let ms = 0;
    for (const [f, s] of stretch) {
      mf += f - f0;
      ms += s - s0;
    }
    mf /= stretch.length;
    ms /= stretch.length;
    for (const [f, s] of stretch) {
      sfs += (f - f0 - mf) * (s - s0 - ms);
      sss += (s - s0 - ms) * (s - s0 - ms);
    }
  }
  if (span < RATE_MIN_SPAN_S) return rate;
  const bound = rate * RATE_MAX_PPM * 1e-6;
  return Math.max(rate - bound, Math.min(rate + bound, sfs / sss));
}

// The output's offset (performanceTime less the frame's context time, ms) by the median
// of the last READINGS distinct timestamps within READINGS_S, `readings` ([[performanceTime,
// offset]], kept by the caller) taking this one in (see _outputNow).
export function outputOffset(readings, performanceTime, offset) {
  const last = readings[readings.length - 1];
  if (!last || last[0] !== performanceTime) {
    readings.push([performanceTime, offset]);
    if (readings.length > READINGS) readings.shift();
  }
  while (readings[0][0] < performanceTime - READINGS_S * 1000) readings.shift();
  return median(readings.map((x) => x[1]));
}

function median(xs) {
  const sorted = [...xs].sort((a, b) => a - b);
  const m = sorted.length >> 1;
  return sorted.length % 2 ? sorted[m] : (sorted[m - 1] + sorted[m]) / 2;
}

// A placed sample at `pos`: the first of its chunk, unless that chunk has one already
// (a correction within it starts a run too). Rows come in playing order.
function notePlaced(run, pos) {
  const chunks = run.chunks;
  let i = Math.max(run.placedUpTo, 0);
  while (i < chunks.length && pos >= chunks[i].pos + chunks[i].len) i++;
  if (i >= chunks.length || pos < chunks[i].pos) return;
  if (chunks[i].first === null) chunks[i].first = pos;
  run.placedUpTo = i;
}
