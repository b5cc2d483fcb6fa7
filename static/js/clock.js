// The page's estimate of the server's shared clock (docs/protocol.md, "Playing in step"),
// from ping/pong exchanges: each gives the server's clock read somewhere between the
// ping leaving and the pong arriving. The filter is the server's rtts/clock.py
// OffsetFilter, step for step, so both give the same estimate on the same samples
// (tests/data/clock_vectors.json is run through each):
//
//   a sample (sent, server, recv): sent and recv on this page's clock, server in Unix s;
//   rtt = recv - sent, mid = (sent + recv) / 2, offset = server - mid. One that cannot be
//   right (rtt < 0, a value not finite) is ignored.
//   Of the last 32 samples take the 8 with the lowest rtt (ties: the earlier first): the
//   pong can wait behind queued audio, and the fastest exchanges are the least skewed.
//   If those span >= 10 s, a least-squares line through (mid, offset), its slope clamped
//   to +-500 ppm, tracks a crystal that runs fast or slow; else their median.
//   Offsets and mids are taken from the best sample's (exact differences): offsets are
//   ~1.7e9 s, and a sum of eight of them would lose microseconds.
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
    this._fit = null; // the estimate for the current samples (fitOffset)
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
    if (![sent, server, recv].every(Number.isFinite) || recv - sent < 0) return;
    this.samples.push({ sent, server, recv });
    if (this.samples.length > WINDOW) this.samples.shift();
    this._fit = null;
  }

  get ready() {
    return this.samples.length >= READY_AFTER;
  }

  // The offset (shared - local, s) at local time `at` (s); 0 with no samples.
  estimate(at) {
    const fit = this._current();
    if (!fit) return 0;
    return fit.base + fit.c + fit.b * (at - fit.origin - fit.m);
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
    const { base, c, b, origin, m } = this._current();
    const local = (sharedS - base - c + b * (origin + m)) / (1 + b);
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

// The filter itself, on samples in arrival order: the offset at local time t is
// base + c + b * (t - origin - m), where base and origin are the best sample's offset
// and mid (the sums are of small differences from them, in rtts/clock.py's order, so
// both round alike).
export function fitOffset(samples) {
  const rows = samples.map((s) => {
    const mid = (s.sent + s.recv) / 2;
    return { rtt: s.recv - s.sent, mid, offset: s.server - mid };
  });
  const chosen = rows.slice().sort((a, b) => a.rtt - b.rtt).slice(0, BEST); // stable: ties stay in order
  const best = chosen[0];
  const offsets = chosen.map((r) => r.offset - best.offset);
  const mids = chosen.map((r) => r.mid - best.mid);
  const minRtt = Math.min(...chosen.map((r) => r.rtt));
  if (Math.max(...mids) - Math.min(...mids) < LINE_SPAN_S) {
    return { base: best.offset, c: median(offsets), b: 0, origin: best.mid, m: 0, minRtt, n: chosen.length };
  }
  const meanMid = mean(mids);
  const meanOffset = mean(offsets);
  let sxx = 0;
  let sxy = 0;
  for (let i = 0; i < mids.length; i++) {
    sxx += (mids[i] - meanMid) ** 2;
    sxy += (mids[i] - meanMid) * (offsets[i] - meanOffset);
  }
  const b = Math.min(Math.max(sxy / sxx, -MAX_SLOPE), MAX_SLOPE);
  return { base: best.offset, c: meanOffset, b, origin: best.mid, m: meanMid, minRtt, n: chosen.length };
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
