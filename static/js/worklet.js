// The playback end of the page: an AudioWorklet processor with a small jitter buffer.
//
// Frames arrive over the port as they come off the WebSocket and are played from a
// queue of chunks; nothing waits for a whole utterance. Playback starts once
// `prebuffer` samples are queued (or the utterance is already complete), which absorbs
// network and scheduling jitter. If the queue runs dry before an utterance's last
// frame has arrived, that is an underrun: it is counted, the edge is faded out (a
// hard cut to zero is what makes a click), and playback waits for the buffer to refill.
//
// Port messages in:  {type:"audio", id, samples: Float32Array}  {type:"end", id}
//                    {type:"flush"}  {type:"prebuffer", samples}
// Port messages out: {type:"status", ...} every ~40 ms while anything changes,
//                    {type:"start", id} first sample of an utterance played,
//                    {type:"done", id, received, played} last sample played (or flushed),
//                    {type:"flushed", dropped} the output is silent after a flush.

const FADE = 64; // samples of fade in/out around gaps and flushes (~3 ms at 24 kHz)
const MAX_REFILL_S = 0.5;
const AUDIBLE = 0.01; // -40 dBFS: quieter than this where a gap begins, and it is not heard

class RttsPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebuffer = opts.prebuffer || Math.round(sampleRate * 0.06);
    this.refill = this.prebuffer; // samples to gather before (re)starting; grows after underruns
    this.chunks = []; // [{id, data: Float32Array, off}]
    this.buffered = 0;
    this.playing = false; // false: silent, waiting for the buffer to fill
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
    this.flushDropped = 0;
    this.sinceStatus = 0;
    this.dirty = true;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(msg) {
    switch (msg.type) {
      case "audio": {
        const n = msg.samples.length;
        this.chunks.push({ id: msg.id, data: msg.samples, off: 0 });
        this.buffered += n;
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
    for (const id of [...this.received.keys()]) this.finish("done", id, { flushed: true });
  }

  dropAll() {
    const dropped = this.buffered;
    this.chunks = [];
    this.buffered = 0;
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
      if (!this.playing && this.buffered > 0 && (this.buffered >= this.refill || this.allComplete())) {
        this.playing = true;
        this.fadeIn = FADE;
      }
      if (this.playing) this.render(out, n);
      else if (this.current !== null) this.starved += n; // mid-utterance, waiting to refill
    }

    this.sinceStatus += n;
    if (this.sinceStatus >= sampleRate * 0.04 && (this.dirty || this.playing)) this.postStatus();
    return true;
  }

  render(out, n) {
    // If more audio is expected but fewer than a quantum plus a fade are queued, this
    // quantum is the last before the queue runs dry: play what there is, fading out at
    // its end. (Waiting until it is empty would cut at full amplitude whenever a chunk
    // ends on a quantum boundary, and frames often do.)
    const last = this.chunks.length ? this.chunks[this.chunks.length - 1].id : this.current;
    const starving = last !== null && !this.ended.has(last) && this.buffered < n + FADE;
    const want = starving ? Math.min(n, this.buffered) : n;
    let i = 0;
    while (i < want && this.chunks.length) {
      const c = this.chunks[0];
      if (c.id !== this.current) {
        if (this.current !== null && !this.hasQueued(this.current)) {
          this.finish("done", this.current);
        }
        this.current = c.id;
        this.port.postMessage({ type: "start", id: c.id, frame: currentFrame + i });
      }
      const take = Math.min(want - i, c.data.length - c.off);
      for (let k = 0; k < take; k++) {
        let s = c.data[c.off + k];
        if (this.fadeIn > 0) s *= 1 - this.fadeIn-- / FADE;
        out[i + k] = s;
      }
      c.off += take;
      i += take;
      this.buffered -= take;
      this.played.set(c.id, (this.played.get(c.id) || 0) + take);
      if (c.off >= c.data.length) this.chunks.shift();
    }
    if (starving) {
      this.underruns++;
      // This stream arrives slower than it plays: wait for more before resuming, so
      // one gap is not followed by many (an adaptive jitter buffer, reset per utterance).
      this.refill = Math.min(this.refill * 2, Math.round(sampleRate * MAX_REFILL_S));
      this.starved += n - i;
      const fade = Math.min(FADE, i);
      // A gap inside speech is heard; one inside a pause (often the leading silence,
      // while the server's second window is still on its way) is not. Count both.
      let peak = 0;
      for (let k = i - fade; k < i; k++) peak = Math.max(peak, Math.abs(out[k]));
      if (peak > AUDIBLE) this.audibleUnderruns++;
      for (let k = 0; k < fade; k++) out[i - fade + k] *= 1 - (k + 1) / fade;
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

  hasQueued(id) {
    for (const c of this.chunks) if (c.id === id) return true;
    return false;
  }

  postStatus() {
    const received = {};
    for (const id of this.changed) if (this.received.has(id)) received[id] = this.received.get(id);
    this.changed.clear();
    this.port.postMessage({
      type: "status",
      buffered: this.buffered,
      playing: this.playing,
      id: this.current,
      pos: this.current === null ? 0 : this.played.get(this.current) || 0,
      underruns: this.underruns,
      audibleUnderruns: this.audibleUnderruns,
      starved: this.starved,
      received,
      frame: currentFrame,
    });
    this.sinceStatus = 0;
    this.dirty = false;
  }
}

registerProcessor("rtts-player", RttsPlayer);
