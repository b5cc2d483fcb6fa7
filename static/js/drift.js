// Timed playback's arithmetic, pure, for the worklet and for tests, which import it into
// a page. The worklet imports it statically: addModule() loads an ES module, whose
// relative imports resolve against worklet.js's URL (Chromium 156 checked; a worklet
// may not use a dynamic import()).
//
// A clock mapping {frame, shared, r} says that context frame `frame` is heard at
// `shared` seconds on the shared clock, and that r context frames pass per shared
// second. An utterance's timeline says when (shared seconds) its sample 0 is heard;
// sample p is heard p / rate later, `rate` being the utterance's (and the context's)
// sample rate.

const SOFT_MIN_S = 0.0005; // below this the error is not corrected: 0.5 ms is inaudible between speakers
const SOFT_MAX_S = 0.015; // above this, one sample at a time would take too long: jump
export const SOFT_EVERY = 1024; // output samples between two soft corrections at most (~0.1 % of the rate)...
export const SOFT_EVERY_MIN = 240; // ...and at least (~0.4 %: a 10 ms step is made up in ~2.5 s, not 10)
const SOFT_TAU_S = 1; // between the two, an error of e samples is made up at e per SOFT_TAU_S

// The context frame at which sample `pos` of an utterance starting at `playAt` is heard.
export function targetFrame(clock, playAt, pos, rate) {
  return clock.frame + (playAt + pos / rate - clock.shared) * clock.r;
}

// The inverse: the utterance position heard at context frame `frame` (fractional).
export function posAt(clock, playAt, frame, rate) {
  return ((frame - clock.frame) / clock.r + clock.shared - playAt) * rate;
}

// What to do about an error of `e` samples (output frame minus the frame the next sample
// is due at: positive is late) when the last soft correction was `sinceLast` output
// samples ago. Soft: drop (late) or duplicate (early) one sample, at most every
// softEvery(e) samples. Hard: the error is too large for that; the caller fades out and
// rejoins at the right position. `n` is the samples the correction removes (negative:
// adds).
export function decide(e, sinceLast, rate) {
  const a = Math.abs(e);
  if (a > SOFT_MAX_S * rate) return { kind: "hard", n: Math.round(e) };
  if (a <= SOFT_MIN_S * rate || sinceLast < softEvery(a, rate)) return { kind: "none", n: 0 };
  return e > 0 ? { kind: "drop", n: 1 } : { kind: "dup", n: -1 };
}

// Output samples between two soft corrections of an error of `a` samples: made up at a / SOFT_TAU_S
// a second, within [SOFT_EVERY_MIN, SOFT_EVERY]. A crystal's drift (hundreds of ppm) or
// an estimate's wobble (a ms or so) is followed at ~0.1 % as before; a step of several ms
// (a loaded box's output slipping by a device callback of 10 ms when its audio thread
// was held up) at up to ~0.4 %, which shifts the pitch by 7 cents where it is made: far
// under what the ear notices in speech, and 4x faster, so pages that slipped are back in
// step within seconds rather than at the end of an announcement.
export function softEvery(a, rate) {
  return Math.max(SOFT_EVERY_MIN, Math.min(SOFT_EVERY, Math.round((rate * SOFT_TAU_S) / a)));
}

// The index k in [off, off + n - 1) where taking out or repeating buf[k] changes the
// sound least: where the wave is both near zero and flat, min |x[k]| + |x[k+1] - x[k]|.
// The earliest such point on ties (silence: the first sample).
export function quietest(buf, off, n) {
  let best = off;
  let cost = Infinity;
  for (let k = off; k < off + n - 1; k++) {
    const c = Math.abs(buf[k]) + Math.abs(buf[k + 1] - buf[k]);
    if (c < cost) {
      cost = c;
      best = k;
    }
  }
  return best;
}
