// The playback end of the page: an AudioWorklet processor with a small jitter buffer,
// and sample-accurate timed playback for announcements played in step on many kiosks.
//
// Frames arrive over the port as they come off the WebSocket and are played from a
// queue of chunks; nothing waits for a whole utterance. Playback starts once
// `prebuffer` samples are queued (or the utterance is already complete), which absorbs
// network and scheduling jitter. If the queue runs dry before an utterance's last
// frame has arrived, that is an underrun: it is counted, the edge is faded out (a
// hard cut to zero is what makes a click), and playback waits for the buffer to refill.
//
// Timed utterances (chunks with a `pos`, a `timeline` for their id and a `clock`
// mapping, all known when the utterance comes to the head of the queue) play each
// sample at the context frame the mapping gives it instead (drift.js has the
// arithmetic): silence until the first is due, then sample-accurately. Samples whose
// time has passed are dropped, never played late, so every kiosk stays on one timeline:
// a late start or an underrun joins at the right position with a fade-in. While playing,
// each quantum measures how far the output is from the mapping: a small error is
// corrected one sample at a time at the quietest point of a quantum (one per 1024 to 240
// samples, sooner the larger the error: drift.js softEvery), a large one by a fade-out
// and a jump to the right position.
//
// Port messages in:  {type:"audio", id, samples: Float32Array, pos?}  {type:"end", id}
//                    {type:"flush"}  {type:"prebuffer", samples}
//                    {type:"timeline", id, playAt}  {type:"clock", frame, shared, r}
//                    {type:"cutAt", id}
// Port messages out: {type:"status", ...} every ~40 ms while anything changes, with
//                    `placed` rows [id, pos, frame] and the timed counters,
//                    {type:"start", id} first sample of an utterance played,
//                    {type:"done", id, received, played} last sample played (or flushed),
//                    {type:"flushed", dropped} the output is silent after a flush.

import { decide, posAt, quietest, targetFrame } from "./drift.js";

const FADE = 64; // samples of fade in/out around gaps and flushes (~3 ms at 24 kHz)
const MAX_REFILL_S = 0.5;
const AUDIBLE = 0.01; // -40 dBFS: quieter than this where a gap begins, and it is not heard
const HARD_WAIT_S = 0.2; // a jump waits this long at most for a quiet moment to happen in
const MAX_PLACED = 256; // placement rows kept between statuses (a status goes every ~40 ms)
const MAX_TIMELINES = 64; // timelines of utterances not finished yet (an unattended page runs for months)

// Exported for tests, which drive it in an OfflineAudioContext (tests/system/test_sync_js.py).
export class RttsPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebuffer = opts.prebuffer || Math.round(sampleRate * 0.06);
    this.refill = this.prebuffer; // samples to gather before (re)starting; grows after underruns
    this.chunks = []; // [{id, data: Float32Array, off, pos, placed}]
    this.buffered = 0;
    this.queued = new Map(); // id -> samples of it in `chunks`
    this.playing = false; // false: silent, waiting for the buffer to fill (or for a timed start)
    this.current = null; // id of the utterance whose samples are being played
    this.ended = new Set(); // ids whose last frame has arrived
    this.received = new Map(); // id -> samples received
    this.played = new Map(); // id -> samples played
    this.changed = new Set(); // ids whose `received` changed since the last status
    this.underruns = 0;
    this.audibleUnderruns = 0;
    this.starved = 0; // samples of silence output during underruns
    this.fadeIn = 0; // samples left of a fade-in
    this.tail = null; // fade-out samples still to play after a flush
    this.fades = []; // [{data, frame}]: fade-outs mixed into the output (cuts, jumps)
    this.flushDropped = 0;
    this.sinceStatus = 0;
    this.dirty = true;
    // Timed playback.
    this.clock = null; // {frame, shared, r}: the latest mapping of context frames to the shared clock
    this.timelines = new Map(); // id -> playAt, shared seconds at which its pos 0 is heard
    this.timed = new Map(); // id -> whether it plays timed, fixed when it comes to the head
    this.cuts = new Map(); // id -> the ids it cuts at its start frame: those queued before it
    this.state = "wait"; // of the timed current: "wait" (for its frame), "play", "hard" (a jump due)
    this.started = false; // the timed current has played a sample (silence since is starvation)
    this.resyncing = false; // the wait is a jump's, not a late arrival's
    this.hardFrom = 0; // frame at which a jump became due
    this.sinceSoft = 0; // output samples since the last soft correction
    this.mark = false; // the next sample written starts a run: report where it went
    this.placed = []; // [[id, pos, frame]] since the last status
    this.late = 0;
    this.softDrops = 0;
    this.softDups = 0;
    this.hardSyncs = 0;
    this.scratch = new Float32Array(2 * FADE + 256); // a look ahead at the next samples
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(msg) {
    switch (msg.type) {
      case "audio": {
        const n = msg.samples.length;
        const pos = Number.isFinite(msg.pos) ? msg.pos : undefined;
        this.chunks.push({ id: msg.id, data: msg.samples, off: 0, pos, placed: false });
        this.buffered += n;
        this.queued.set(msg.id, (this.queued.get(msg.id) || 0) + n);
        this.received.set(msg.id, (this.received.get(msg.id) || 0) + n);
        this.changed.add(msg.id);
        break;
      }
      case "end":
        if (!this.received.has(msg.id)) break; // no audio, or already flushed: nothing to finish
        this.ended.add(msg.id);
        if (this.current === msg.id && !this.hasQueued(msg.id)) {
          // It starved just before its last frame: nothing more will come.
          this.finish("done", msg.id);
          this.current = null;
        }
        break;
      case "flush":
        this.flush();
        break;
      case "prebuffer":
        this.prebuffer = this.refill = msg.samples;
        break;
      case "timeline":
        if (!Number.isFinite(msg.playAt)) break;
        this.timelines.delete(msg.id);
        this.timelines.set(msg.id, msg.playAt);
        // Timelines of utterances that never came are forgotten, the oldest first (not
        // the one playing).
        if (this.timelines.size > MAX_TIMELINES) {
          const old = [...this.timelines.keys()].find((id) => id !== this.current);
          this.timelines.delete(old);
        }
        break;
      case "clock":
        if ([msg.frame, msg.shared, msg.r].every(Number.isFinite) && msg.r > 0) {
          this.clock = { frame: msg.frame, shared: msg.shared, r: msg.r };
        }
        break;
      case "cutAt":
        // What is here now is before it; what comes later (after it) is not cut.
        this.cuts.set(msg.id, new Set([...this.received.keys()].filter((id) => id !== msg.id)));
        if (this.cuts.size > MAX_TIMELINES) this.cuts.delete(this.cuts.keys().next().value);
        break;
    }
    this.dirty = true;
  }

  // True when every queued chunk belongs to an utterance whose last frame is in:
  // waiting for more would only delay the end of a short utterance.
  allComplete() {
    for (const c of this.chunks) if (!this.ended.has(c.id)) return false;
    return true;
  }

  // Applied when the message arrives, not at the next render: audio posted right after
  // the flush (the utterance that interrupted) must survive it.
  flush() {
    const tail = new Float32Array(FADE);
    if (this.playing) {
      // Fade out what would have played next instead of cutting mid-wave.
      for (let i = 0; i < FADE && this.chunks.length; i++) {
        const c = this.chunks[0];
        tail[i] = c.data[c.off++] * (1 - i / FADE);
        if (c.off >= c.data.length) this.chunks.shift();
      }
    }
    this.flushDropped = this.dropAll();
    this.tail = tail;
    this.fades = [];
    for (const id of [...this.received.keys()]) this.finish("done", id, { flushed: true });
  }

  dropAll() {
    const dropped = this.buffered;
    this.chunks = [];
    this.buffered = 0;
    this.queued.clear();
    this.playing = false;
    this.current = null;
    return dropped;
  }

  // Final counts of an utterance go out with its `done`, then it is forgotten, so an
  // unattended page can run for months without these maps growing.
  finish(type, id, extra) {
    this.refill = this.prebuffer;
    this.port.postMessage({
      type, id, received: this.received.get(id) || 0, played: this.played.get(id) || 0, ...extra,
    });
    this.received.delete(id);
    this.played.delete(id);
    this.ended.delete(id);
    this.changed.delete(id);
    this.queued.delete(id);
    this.timelines.delete(id);
    this.timed.delete(id);
    this.cuts.delete(id);
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    const n = out.length;
    out.fill(0);

    if (this.tail) {
      // The fade-out after a flush, then silence: the flush is acknowledged only now,
      // when what reaches the speakers is zero.
      out.set(this.tail.subarray(0, n));
      this.tail = null;
      this.port.postMessage({ type: "flushed", dropped: this.flushDropped, frame: currentFrame });
      this.dirty = true;
    } else {
      const cut = this.dueCut(n);
      if (cut === null) {
        this.renderAny(out, n, currentFrame);
      } else {
        // What plays before a high-priority cut fades out so as to end at its first frame.
        this.renderAny(out.subarray(0, cut.at), cut.at, currentFrame);
        this.cutBefore(cut.before, currentFrame + cut.at);
        this.renderAny(out.subarray(cut.at), n - cut.at, currentFrame + cut.at);
      }
    }
    this.mixFades(out, currentFrame);

    this.sinceStatus += n;
    const news = this.dirty || this.playing || this.placed.length > 0;
    if (this.sinceStatus >= sampleRate * 0.04 && news) this.postStatus();
    return true;
  }

  // out[0, n) from context frame f0 on, from the head of the queue.
  renderAny(out, n, f0) {
    if (n === 0) return;
    const head = this.chunks[0];
    if (head ? this.timedChunk(head) : this.current !== null && this.timed.get(this.current)) {
      this.renderTimed(out, n, f0);
      return;
    }
    if (!this.playing && this.buffered > 0 && (this.buffered >= this.refill || this.allComplete())) {
      this.playing = true;
      this.fadeIn = FADE;
    }
    if (this.playing) this.render(out, n, f0);
    else if (this.current !== null) this.starved += n; // mid-utterance, waiting to refill
  }

  render(out, n, f0) {
    // If more audio is expected but fewer than a quantum plus a fade are queued, this
    // quantum is the last before the queue runs dry: play what there is, fading out at
    // its end. (Waiting until it is empty would cut at full amplitude whenever a chunk
    // ends on a quantum boundary, and frames often do.) A timed utterance queued next
    // is not more of this one: it starts at its own frame.
    const last = this.chunks.length ? this.chunks[this.chunks.length - 1].id : this.current;
    const starving =
      last !== null && !this.ended.has(last) && this.buffered < n + FADE && !this.timedQueued();
    const want = starving ? Math.min(n, this.buffered) : n;
    let i = 0;
    while (i < want && this.chunks.length) {
      const c = this.chunks[0];
      if (c.id !== this.current) {
        if (this.current !== null && !this.hasQueued(this.current)) {
          this.finish("done", this.current);
        }
        if (this.timedChunk(c)) {
          this.current = null; // the rest of this quantum is silence; it starts at its frame
          break;
        }
        this.current = c.id;
        this.timed.set(c.id, false);
        this.port.postMessage({ type: "start", id: c.id, frame: f0 + i });
      }
      const take = Math.min(want - i, c.data.length - c.off);
      if (take > 0 && c.pos !== undefined && !c.placed) this.place(c.id, c.pos + c.off, f0 + i);
      c.placed = true;
      for (let k = 0; k < take; k++) {
        let s = c.data[c.off + k];
        if (this.fadeIn > 0) s *= 1 - this.fadeIn-- / FADE;
        out[i + k] = s;
      }
      c.off += take;
      i += take;
      this.buffered -= take;
      this.queued.set(c.id, this.queued.get(c.id) - take);
      this.played.set(c.id, (this.played.get(c.id) || 0) + take);
      if (c.off >= c.data.length) this.chunks.shift();
    }
    if (starving) {
      this.underruns++;
      // This stream arrives slower than it plays: wait for more before resuming, so
      // one gap is not followed by many (an adaptive jitter buffer, reset per utterance).
      this.refill = Math.min(this.refill * 2, Math.round(sampleRate * MAX_REFILL_S));
      this.starved += n - i;
      this.fadeOutAt(out, i);
      this.playing = false;
      this.dirty = true;
    } else if (i < n) {
      // Everything queued is played and the utterance is complete.
      if (this.current !== null) this.finish("done", this.current);
      this.current = null;
      this.playing = false;
      this.dirty = true;
    }
  }

  // Fades out the samples before out[i], where a gap begins.
  fadeOutAt(out, i) {
    const fade = Math.min(FADE, i);
    // A gap inside speech is heard; one inside a pause (often the leading silence,
    // while the server's second window is still on its way) is not. Count both.
    let peak = 0;
    for (let k = i - fade; k < i; k++) peak = Math.max(peak, Math.abs(out[k]));
    if (peak > AUDIBLE) this.audibleUnderruns++;
    for (let k = 0; k < fade; k++) out[i - fade + k] *= 1 - (k + 1) / fade;
  }

  hasQueued(id) {
    for (const c of this.chunks) if (c.id === id) return true;
    return false;
  }

  // ------------------------------------------------------------ timed playback

  // Whether chunk `c` plays at the frames its timeline gives: decided for the whole
  // utterance when it comes to the head (a clock arriving mid-way does not move it).
  timedChunk(c) {
    const fixed = this.timed.get(c.id);
    if (fixed !== undefined) return fixed;
    return c.pos !== undefined && this.clock !== null && this.timelines.has(c.id);
  }

  timedQueued() {
    for (const c of this.chunks) if (this.timedChunk(c)) return true;
    return false;
  }

  // The context frame at which sample `pos` of utterance `id` is to be heard.
  frameOf(id, pos) {
    return targetFrame(this.clock, this.timelines.get(id), pos, sampleRate);
  }

  // Timed utterances from the head of the queue into out[0, n), from context frame f0
  // on: each waits for its frame, then plays under watch of the clock.
  renderTimed(out, n, f0) {
    let i = 0;
    while (i < n && this.chunks.length) {
      const c = this.chunks[0];
      if (c.off >= c.data.length) {
        this.chunks.shift(); // an empty chunk
        continue;
      }
      if (c.id !== this.current) {
        if (this.current !== null && !this.hasQueued(this.current)) this.finish("done", this.current);
        this.current = null;
        this.playing = false;
        if (!this.timedChunk(c)) break; // untimed: the jitter buffer's, from the next quantum
        this.current = c.id;
        this.timed.set(c.id, true);
        this.state = "wait";
        this.started = false;
        this.resyncing = false;
      }
      i = this.state === "wait" ? this.join(out, i, n, f0) : this.playTimed(out, i, n, f0);
    }
    if (i < n && this.current !== null && this.timed.get(this.current) && !this.hasQueued(this.current)) {
      if (this.ended.has(this.current)) {
        // All of it played (or dropped as late): done.
        this.finish("done", this.current);
        this.current = null;
        this.playing = false;
        this.dirty = true;
      } else if (this.started) {
        this.starved += n - i; // an underrun: waiting for more
      }
    }
  }

  // In the wait state at out[i]: drops the samples whose time has passed, then starts
  // the next one at its exact frame if that falls in this quantum and enough is queued
  // to go on with. Returns the index of the first sample written, or n (still waiting).
  join(out, i, n, f0) {
    const id = this.current;
    const playAt = this.timelines.get(id);
    // The position due now; dropped up to chunk by chunk, as each chunk's own pos says
    // where it belongs.
    const due = Math.round(posAt(this.clock, playAt, f0 + i, sampleRate));
    let dropped = 0;
    while (this.chunks.length && this.chunks[0].id === id) {
      const c = this.chunks[0];
      const p = c.pos + c.off;
      if (p >= due) break;
      dropped += this.skip(Math.min(due - p, c.data.length - c.off));
    }
    if (!this.resyncing) this.late += dropped;
    if (dropped) this.dirty = true;
    const c = this.chunks[0];
    if (!c || c.id !== id) return n; // everything queued was late
    const s = i + Math.max(0, Math.round(this.frameOf(id, c.pos + c.off) - (f0 + i)));
    // Starting with a few samples would be an underrun right away: the jitter buffer's
    // rule, without its growth (a timed stream cannot catch up by waiting; its late
    // samples are dropped anyway).
    const enough = this.ended.has(id) || this.queued.get(id) >= this.prebuffer;
    const gap = this.started && !this.resyncing; // silence of an underrun, not of a jump
    if (s >= n || !enough) {
      if (gap) this.starved += n - i;
      return n;
    }
    if (gap) this.starved += s - i;
    // Sample 0 on time is the utterance's own start; anything else is joined mid-way.
    this.fadeIn = c.pos + c.off > 0 ? FADE : 0;
    this.state = "play";
    this.playing = true;
    this.resyncing = false;
    this.mark = true;
    this.dirty = true;
    if (!this.started) {
      this.started = true;
      this.port.postMessage({ type: "start", id, frame: f0 + s });
    }
    return s;
  }

  // Plays out[i, n) of the timed current, after measuring how far it is from its mapping.
  // Returns the index reached.
  playTimed(out, i, n, f0) {
    const id = this.current;
    const c = this.chunks[0];
    const len = n - i;
    const avail = this.queued.get(id);
    if (!this.ended.has(id) && avail < len + FADE) return this.starve(out, i, n, f0);
    // Positive: the output is behind the samples' frames.
    const e = f0 + i - this.frameOf(id, c.pos + c.off);
    let d = decide(e, this.sinceSoft, sampleRate);
    if (d.kind === "hard") {
      if (this.state !== "hard") {
        this.state = "hard";
        this.hardFrom = f0 + i;
      }
      // A jump is a fade-out and a fade-in: made in a quiet moment if one comes soon.
      const quiet = this.peak(len) < AUDIBLE;
      if (quiet || f0 + i - this.hardFrom >= HARD_WAIT_S * sampleRate) return this.resync(i, f0);
      d = { kind: "none", n: 0 };
    } else if (this.state === "hard") {
      this.state = "play"; // the mapping came back
    }
    if (len >= 2 && d.kind === "drop" && avail > len) {
      const k = quietest(this.scratch, 0, this.look(len + 1));
      let w = this.write(out, i, k, f0 + i);
      this.skip(1);
      this.softDrops++;
      this.sinceSoft = 0;
      w += this.write(out, i + w, len - w, f0 + i + w);
      return i + w;
    }
    if (len >= 2 && d.kind === "dup" && avail >= len) {
      const k = quietest(this.scratch, 0, this.look(len));
      let w = this.write(out, i, k + 1, f0 + i);
      out[i + w] = out[i + w - 1]; // the same sample once more
      w++;
      this.softDups++;
      this.sinceSoft = 0;
      this.mark = true;
      w += this.write(out, i + w, len - w, f0 + i + w);
      return i + w;
    }
    const w = this.write(out, i, len, f0 + i);
    // The last of the utterance may end mid-quantum: what follows is the next one's.
    return w > 0 ? i + w : n;
  }

  // The queue of the timed current runs dry before its last frame: play what there is,
  // fading out, and wait. Its next sample rejoins at its own frame (late, mostly): the
  // timeline does not move, and the jitter buffer does not grow.
  starve(out, i, n, f0) {
    const w = this.write(out, i, n - i, f0 + i);
    this.fadeOutAt(out, i + w);
    this.underruns++;
    this.starved += n - i - w;
    this.state = "wait";
    this.playing = false;
    this.dirty = true;
    return n;
  }

  // A hard correction at out[i]: what would play next fades out over FADE samples
  // (mixed in, under whatever follows), and the wait state skips the samples or waits
  // the frames to the right position.
  resync(i, f0) {
    this.fadeOut(f0 + i);
    this.hardSyncs++;
    this.state = "wait";
    this.resyncing = true;
    this.dirty = true;
    return i;
  }

  // The next FADE samples of the current, fading out, mixed into the output from
  // context frame `frame` on (under whatever is written there).
  fadeOut(frame) {
    const data = new Float32Array(FADE);
    const k = this.write(data, 0, FADE, frame);
    for (let j = 0; j < k; j++) data[j] *= 1 - j / FADE;
    this.fades.push({ data: data.subarray(0, k), frame });
    this.mark = true;
  }

  // Adds the fade-outs due in out[], which starts at context frame f0.
  mixFades(out, f0) {
    if (!this.fades.length) return;
    for (const f of this.fades) {
      for (let k = Math.max(0, f.frame - f0); k < out.length && f0 + k - f.frame < f.data.length; k++) {
        out[k] += f.data[f0 + k - f.frame];
      }
    }
    this.fades = this.fades.filter((f) => f.frame + f.data.length > f0 + out.length);
  }

  // A high-priority cut whose fade must begin in this quantum: {id, before, at} (the
  // index it begins at, FADE before the cut's first frame), or null. Every kiosk ends
  // what it was playing at that same instant, whether the cut's audio is there or not.
  dueCut(n) {
    if (!this.cuts.size || this.clock === null) return null;
    for (const [id, before] of this.cuts) {
      if (!this.timelines.has(id)) continue;
      const at = Math.round(this.frameOf(id, 0)) - currentFrame - FADE;
      if (at >= n) continue;
      this.cuts.delete(id);
      return { id, before, at: Math.max(0, at) };
    }
    return null;
  }

  // Drops the utterances `before` a cut that are still here, fading out what plays
  // from `frame` on.
  cutBefore(before, frame) {
    const ids = new Set([...before].filter((id) => this.received.has(id)));
    if (!ids.size) return;
    if (this.playing && ids.has(this.current)) this.fadeOut(frame);
    const kept = [];
    for (const c of this.chunks) {
      if (ids.has(c.id)) this.buffered -= c.data.length - c.off;
      else kept.push(c);
    }
    this.chunks = kept;
    if (ids.has(this.current)) {
      this.current = null;
      this.playing = false;
      this.state = "wait";
    }
    for (const id of ids) this.finish("done", id, { flushed: true });
    this.dirty = true;
  }

  // Moves up to k samples of the current utterance from the queue to dst[at...], where
  // dst[at] is heard at context frame `frame`: with the fade-in, and a placement row for
  // the first sample of each chunk and of each run after a correction. Returns how many.
  write(dst, at, k, frame) {
    const id = this.current;
    let w = 0;
    while (w < k && this.chunks.length && this.chunks[0].id === id) {
      const c = this.chunks[0];
      const take = Math.min(k - w, c.data.length - c.off);
      if (take > 0) {
        if (c.pos !== undefined && (this.mark || !c.placed)) this.place(id, c.pos + c.off, frame + w);
        c.placed = true;
        this.mark = false;
      }
      for (let j = 0; j < take; j++) {
        let s = c.data[c.off + j];
        if (this.fadeIn > 0) s *= 1 - this.fadeIn-- / FADE;
        dst[at + w + j] = s;
      }
      this.advance(c, take);
      w += take;
    }
    this.played.set(id, (this.played.get(id) || 0) + w);
    this.sinceSoft += w;
    return w;
  }

  // Drops up to k samples of the current utterance from the queue; returns how many.
  skip(k) {
    const id = this.current;
    let d = 0;
    while (d < k && this.chunks.length && this.chunks[0].id === id) {
      const c = this.chunks[0];
      const take = Math.min(k - d, c.data.length - c.off);
      this.advance(c, take);
      d += take;
    }
    if (d) this.mark = true;
    return d;
  }

  advance(c, take) {
    c.off += take;
    this.buffered -= take;
    this.queued.set(c.id, this.queued.get(c.id) - take);
    if (c.off >= c.data.length) this.chunks.shift();
  }

  // Copies up to k of the current's next samples into `scratch` without taking them.
  look(k) {
    const id = this.current;
    let w = 0;
    for (const c of this.chunks) {
      if (c.id !== id || w >= k) break;
      const take = Math.min(k - w, c.data.length - c.off);
      this.scratch.set(c.data.subarray(c.off, c.off + take), w);
      w += take;
    }
    return w;
  }

  peak(k) {
    const m = this.look(k);
    let peak = 0;
    for (let j = 0; j < m; j++) peak = Math.max(peak, Math.abs(this.scratch[j]));
    return peak;
  }

  place(id, pos, frame) {
    this.placed.push([id, pos, frame]);
    if (this.placed.length > MAX_PLACED) this.placed.shift();
  }

  postStatus() {
    const received = {};
    for (const id of this.changed) if (this.received.has(id)) received[id] = this.received.get(id);
    this.changed.clear();
    // A timed utterance waiting for its first frame is not being played yet.
    const id = this.current !== null && this.timed.get(this.current) && !this.started ? null : this.current;
    this.port.postMessage({
      type: "status",
      buffered: this.buffered,
      playing: this.playing,
      id,
      pos: id === null ? 0 : this.played.get(id) || 0,
      underruns: this.underruns,
      audibleUnderruns: this.audibleUnderruns,
      starved: this.starved,
      received,
      frame: currentFrame,
      placed: this.placed,
      late: this.late,
      softDrops: this.softDrops,
      softDups: this.softDups,
      hardSyncs: this.hardSyncs,
    });
    this.placed = [];
    this.sinceStatus = 0;
    this.dirty = false;
  }
}

registerProcessor("rtts-player", RttsPlayer);
