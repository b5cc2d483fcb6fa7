// The page's estimate of the server's shared clock (docs/protocol.md, "Playing in step"),
// from ping/pong exchanges. The filter is the server's rtts/clock.py OffsetFilter, step
// for step, so both give the same estimate on the same exchanges (tests/data/
// clock_vectors.json is run through each):
//
//   an exchange (sent, server, recv): sent and recv on this page's clock, server in Unix
//   s. The server's clock read `server` somewhere between sent and recv, so the offset
//   (shared - local) lay between server - recv and server - sent, whatever each way took.
//   One that cannot be right (recv < sent, a value not finite) is ignored.
//   The last 128 are kept and their intervals intersected: the middle of the intersection
//   is wrong by half the difference between the fastest way out and the fastest way back
//   seen, not by one exchange's asymmetry (a pong behind audio is slow one way only).
//   Once they span 30 s, a slope (steps of 5 ppm within +-500 ppm) follows a crystal that
//   runs fast or slow: the smallest that leaves the intersection within a slack of its
//   widest (1 ms, or a quarter of the widest where that is narrow). Not the widest
//   itself: pongs held back on one side while audio flows tilt it by a few ms.
//   An empty intersection means the offset changed (a clock was stepped): the oldest go
//   until it is not. The error is half the intersection's width: a bound, not a guess.
//   Everything is relative to the latest exchange: offsets are ~1.7e9 s, and the
//   differences are exact where sums would lose microseconds.
//
// Pure apart from its defaults: the local clock and the page's time origin are injected.
// Never Date.now(), which jumps and slews with the system clock.

export const WINDOW = 128;
export const READY_AFTER = 5;
export const SPAN_S = 30;
export const SLOPE_STEP = 5e-6;
export const MAX_SLOPE = 500e-6;
export const SLOPE_SLACK_S = 0.001;
export const SLOPE_SLACK_SHARE = 0.25;

export class ClockSync {
  // skewPpm (tests only): this page's local clock runs fast by that much, as a cheap
  // crystal would; it applies to pings and output timestamps alike, so they agree.
  constructor({ skewPpm = 0, now = () => performance.now(), originMs = performance.timeOrigin } = {}) {
    this.skew = skewPpm * 1e-6;
    this.now = now;
    this.originMs = originMs;
    this.samples = []; // [{sent, server, recv}] by arrival, at most WINDOW
    this._fit = null; // what they say (fitOffset); null before any
    this.synced = false; // ready once since the last reset: the estimate is used from then on
  }

  // Forgets every sample (a new connection may reach another server).
  reset() {
    this.samples = [];
    this._fit = null;
    this.synced = false;
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
    const samples = this.samples;
    samples.push({ sent, server, recv });
    if (samples.length > WINDOW) samples.shift();
    let fit = fitOffset(samples);
    while (fit.low > fit.high && samples.length > 1) {
      samples.shift();
      fit = fitOffset(samples);
    }
    this._fit = fit;
    if (this.ready) this.synced = true;
  }

  // Enough exchanges for a first estimate (the filter's own rule, as rtts/clock.py's).
  get ready() {
    return this.samples.length >= READY_AFTER;
  }

  // Whether the estimate is used: from the first time it was ready. When exchanges stop
  // meeting (a clock drifting faster than the round trip is short), the filter keeps
  // fewer than READY_AFTER for a while; what it keeps is still its best estimate, and
  // playing in step must not stop and start with it.
  get usable() {
    return this.synced;
  }

  // The offset (shared - local, s) at local time `at` (s); 0 with no samples.
  estimate(at) {
    const fit = this._fit;
    if (!fit) return 0;
    return fit.base + (fit.low + fit.high) / 2 + fit.slope * (at - fit.ref);
  }

  // At most how wrong the estimate is, path asymmetry included (s); Infinity before any.
  get error() {
    const fit = this._fit;
    return fit ? (fit.high - fit.low) / 2 : Infinity;
  }

  // Shared-clock seconds at a real performance.now() reading.
  sharedS(perfMs) {
    const local = this.toLocalMs(perfMs) / 1000;
    return local + this.estimate(local);
  }

  // The real performance.now() reading at which the shared clock reads `sharedS`: the
  // estimate is a line in local time, so this inverts it exactly.
  perfMs(sharedS) {
    const { base, low, high, slope, ref } = this._fit;
    const local = (sharedS - base - (low + high) / 2 + slope * ref) / (1 + slope);
    return (local * 1000) / (1 + this.skew);
  }

  // For reports: offsetMs is the estimate less this page's own reading of Unix time
  // (timeOrigin + now, the same clock on every page of a host), so 0 is right on one host.
  get stats() {
    if (!this._fit) return { offsetMs: null, rttMs: null, errorMs: null, samples: 0 };
    const perf = this.now();
    return {
      offsetMs: (this.sharedS(perf) - (this.originMs + perf) / 1000) * 1000,
      rttMs: Math.min(...this.samples.map((x) => x.recv - x.sent)) * 1000, // the fastest kept
      errorMs: this.error * 1000,
      samples: this.samples.length,
    };
  }
}

// The filter itself, on the kept exchanges in arrival order: the offset at local time
// t is base + (low + high) / 2 + slope * (t - ref), ref the latest exchange's middle.
export function fitOffset(samples) {
  const last = samples[samples.length - 1];
  const ref = (last.sent + last.recv) / 2;
  const base = last.server - ref;
  const times = samples.map((s) => (s.sent + s.recv) / 2 - ref);
  const lows = samples.map((s) => s.server - last.server - (s.recv - ref));
  const highs = samples.map((s) => s.server - last.server - (s.sent - ref));
  let slope = 0;
  let [low, high] = bounds(times, lows, highs, slope);
  if (-times[0] >= SPAN_S || low > high) {
    // Long enough to show a drift, or already showing one (narrow intervals stop meeting
    // within seconds of a fast crystal).
    const slopes = slopeSteps(Math.round(MAX_SLOPE / SLOPE_STEP)).map((k) => k * SLOPE_STEP);
    const widths = slopes.map((b) => {
      const [low, high] = bounds(times, lows, highs, b);
      return high - low;
    });
    const widest = Math.max(...widths);
    const slack = Math.min(SLOPE_SLACK_S, Math.max(widest, 0) * SLOPE_SLACK_SHARE);
    slope = slopes[widths.findIndex((w) => w >= widest - slack)];
    [low, high] = bounds(times, lows, highs, slope);
  }
  return { ref, base, low, high, slope };
}

// 0, 1, -1, 2, -2, ... n, -n: the smaller slope first.
function slopeSteps(n) {
  const out = [0];
  for (let i = 1; i <= n; i++) out.push(i, -i);
  return out;
}

// The intersection at ref once `slope` is taken out of every interval.
function bounds(times, lows, highs, slope) {
  let low = -Infinity;
  let high = Infinity;
  for (let i = 0; i < times.length; i++) {
    low = Math.max(low, lows[i] - slope * times[i]);
    high = Math.min(high, highs[i] - slope * times[i]);
  }
  return [low, high];
}
