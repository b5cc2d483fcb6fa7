// Main-thread side of playback: one AudioContext running at the session's sample rate
// (so `pts` and sample counts mean the same thing on both ends) and the worklet node.

const WORKLET_URL = new URL("./worklet.js", import.meta.url);
const QUANTUM = 128; // samples an AudioWorklet renders per call

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
  constructor({ prebufferMs = 60 } = {}) {
    super();
    this.prebufferMs = prebufferMs;
    this.ctx = null;
    this.node = null;
    this.sampleRate = 0;
    this.status = { buffered: 0, playing: false, id: null, pos: 0, underruns: 0, audibleUnderruns: 0, starved: 0 };
    this._flushWaiters = [];
    this._opening = null;
    this._wanted = 0; // the rate of the last open(): messages wait for that context
    this._pending = []; // messages for a worklet that is still being created
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
    ctx.onstatechange = () => this._emit("state", { state: ctx.state });
    this.ctx = ctx;
    this.node = node;
    this.sampleRate = sampleRate;
    // Another rate may have been asked for while this one opened (a first `ready` at
    // 24 kHz, then Opus's at 48 kHz): what came meanwhile is for that context, which
    // replaces this one (closing it would lose it).
    if (this._wanted === sampleRate) {
      for (const [msg, transfer] of this._pending.splice(0)) node.port.postMessage(msg, transfer);
    }
    this._emit("state", { state: ctx.state });
  }

  get running() {
    return this.ctx !== null && this.ctx.state === "running";
  }

  // Browsers start audio only after a user gesture (unless told otherwise, as a kiosk is).
  async resume() {
    if (this.ctx && this.ctx.state === "suspended") await this.ctx.resume();
  }

  push(id, samples) {
    this._post({ type: "audio", id, samples }, [samples.buffer]);
  }

  end(id) {
    this._post({ type: "end", id }, []);
  }

  _post(msg, transfer) {
    if (this.node && this.sampleRate === this._wanted) this.node.port.postMessage(msg, transfer);
    else this._pending.push([msg, transfer]);
  }

  // Drops everything queued; resolves once the worklet's output is silent.
  flush() {
    this._pending = [];
    if (!this.node) return Promise.resolve({ dropped: 0 });
    this.node.port.postMessage({ type: "flush" });
    // A suspended context renders nothing, so it is silent already; the flag is applied
    // before its next render.
    if (!this.running) return Promise.resolve({ dropped: 0 });
    return new Promise((resolve) => this._flushWaiters.push(resolve));
  }

  // How many samples of utterance `id` have reached the listener, now: what the worklet
  // had played at its last status, moved on by the frames rendered since (statuses come
  // every ~40 ms, a word lasts a few hundred), less the output's latency. The context's
  // output timestamp says which frame the device plays at this moment, latency included;
  // where the browser gives none, currentTime less the latencies it reports. null when
  // `id` is not what the worklet is playing.
  heard(id) {
    const st = this.status;
    const ctx = this.ctx;
    if (!ctx || st.id !== id || st.frame === undefined) return null;
    const rate = this.sampleRate;
    let now = ctx.currentTime * rate - ((ctx.baseLatency || 0) + (ctx.outputLatency || 0)) * rate;
    const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : null;
    if (ts && ts.contextTime > 0 && ts.performanceTime > 0) {
      // Moved on by the time since that frame was played (the timestamp is renewed once a
      // device callback, ~10 ms); back, if the browser dates it ahead.
      now = (ts.contextTime + (performance.now() - ts.performanceTime) / 1000) * rate;
    }
    // The status's `pos` counts the quantum that began at its `frame`; at most what was
    // queued then can have played since, and nothing while the worklet waits to refill.
    const ahead = Math.min(now - (st.frame + QUANTUM), st.playing ? st.buffered : 0);
    return Math.max(0, Math.round(st.pos + ahead));
  }

  bufferedMs() {
    return this.sampleRate ? (this.status.buffered / this.sampleRate) * 1000 : 0;
  }

  _onMessage(msg) {
    if (msg.type === "status") {
      this.status = msg;
      this._emit("status", msg);
    } else if (msg.type === "flushed") {
      for (const resolve of this._flushWaiters.splice(0)) resolve(msg);
    } else {
      this._emit(msg.type, msg); // start, done
    }
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}
