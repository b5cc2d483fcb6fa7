// The page's estimate of the server's shared clock (docs/protocol.md, "Playing in step"),
// from ping/pong exchanges: each gives the server's clock read somewhere between the
// ping leaving and the pong arriving. The filter is the server's rtts/clock.py
// OffsetFilter, step for step, so both give the same estimate on the same samples
// (tests/data/clock_vectors.json is run through each):
//
//   a sample (sent, server, recv): sent and recv on this page's clock, server in Unix s;
//   rtt = recv - sent, mid = (sent + recv) / 2, offset = server - mid.
//   Of the last 32 samples take the 8 with the lowest rtt (ties: the earlier first): the
//   pong can wait behind queued audio, and the fastest exchanges are the least skewed.
//   If those span >= 10 s, a least-squares line through (mid, offset), its slope clamped
//   to +-500 ppm, tracks a crystal that runs fast or slow; else their median.
//
// Pure apart from its defaults: the local clock and the page's time origin are injected.
// Never Date.now(), which jumps and slews with the system clock.

export const WINDOW = 32;
export const BEST = 8;
export const READY_AFTER = 5;
export const LINE_SPAN_S = 10;
export const MAX_SLOPE = 500e-6;

export class ClockSync {
  // skewPpm (tests only): this page's local clock runs fast by that much, as a cheap
  // crystal would; it applies to pings and output timestamps alike, so they agree.
  constructor({ skewPpm = 0, now = () => performance.now(), originMs = performance.timeOrigin } = {}) {
    this.skew = skewPpm * 1e-6;
    this.now = now;
    this.originMs = originMs;
    this.samples = []; // [{sent, server, recv}] by arrival, at most WINDOW
    this._fit = null; // {chosen, c, b, m}: the estimate for the current samples
  }

  // Forgets every sample (a new connection may reach another server).
  reset() {
    this.samples = [];
    this._fit = null;
  }

  // The page's local clock, ms: performance.now(), skewed for tests.
  localMs() {
    return this.toLocalMs(this.now());
  }

  toLocalMs(perfMs) {
    return perfMs * (1 + this.skew);
  }

  // One exchange, all in seconds: ping sent and pong received on the local clock, the
  // server's shared clock in between.
  add(sent, server, recv) {
    this.samples.push({ sent, server, recv });
    if (this.samples.length > WINDOW) this.samples.shift();
    this._fit = null;
  }

  get ready() {
    return this.samples.length >= READY_AFTER;
  }

  // The offset (shared - local, s) at local time `at` (s); null with no samples.
  estimate(at) {
    const fit = this._current();
    if (!fit) return null;
    return fit.c + fit.b * (at - fit.m);
  }

  // Half the lowest round trip among the chosen: the offset is known no better than that.
  get error() {
    const fit = this._current();
    return fit ? fit.minRtt / 2 : null;
  }

  // Shared-clock seconds at a real performance.now() reading.
  sharedS(perfMs) {
    const local = this.toLocalMs(perfMs) / 1000;
    return local + this.estimate(local);
  }

  // The real performance.now() reading at which the shared clock reads `sharedS`: the
  // estimate is a line in local time, so this inverts it exactly.
  perfMs(sharedS) {
    const { c, b, m } = this._current();
    const local = (sharedS - c + b * m) / (1 + b);
    return (local * 1000) / (1 + this.skew);
  }

  // For reports: offsetMs is the estimate less this page's own reading of Unix time
  // (timeOrigin + now, the same clock on every page of a host), so 0 is right on one host.
  get stats() {
    const fit = this._current();
    if (!fit) return { offsetMs: null, rttMs: null, errorMs: null, samples: 0 };
    const perf = this.now();
    return {
      offsetMs: (this.sharedS(perf) - (this.originMs + perf) / 1000) * 1000,
      rttMs: fit.minRtt * 1000,
      errorMs: (fit.minRtt / 2) * 1000,
      samples: this.samples.length,
    };
  }

  _current() {
    if (!this._fit && this.samples.length) this._fit = fitOffset(this.samples);
    return this._fit;
  }
}

// The filter itself, on samples in arrival order: the line offset = c + b * (t - m).
export function fitOffset(samples) {
  const rows = samples.map((s, i) => ({ i, rtt: s.recv - s.sent, mid: (s.sent + s.recv) / 2, server: s.server }));
  for (const r of rows) r.offset = r.server - r.mid;
  const chosen = rows.slice().sort((a, b) => a.rtt - b.rtt || a.i - b.i).slice(0, BEST);
  const minRtt = chosen[0].rtt;
  const mids = chosen.map((r) => r.mid);
  const span = Math.max(...mids) - Math.min(...mids);
  if (span >= LINE_SPAN_S) {
    const m = mean(mids);
    const c = mean(chosen.map((r) => r.offset));
    let sxy = 0;
    let sxx = 0;
    for (const r of chosen) {
      sxy += (r.mid - m) * (r.offset - c);
      sxx += (r.mid - m) * (r.mid - m);
    }
    const b = Math.min(MAX_SLOPE, Math.max(-MAX_SLOPE, sxy / sxx));
    return { c, b, m, minRtt, n: chosen.length };
  }
  return { c: median(chosen.map((r) => r.offset)), b: 0, m: 0, minRtt, n: chosen.length };
}

function mean(xs) {
  let s = 0;
  for (const x of xs) s += x;
  return s / xs.length;
}

function median(xs) {
  const s = xs.slice().sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}
