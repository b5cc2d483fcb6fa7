// One WebSocket to rtts speaking protocol v1 (docs/protocol.md): binary msgpack frames,
// `hello` on every (re)connect, a ping every few seconds so a dead link is noticed
// even when TCP is not told, and reconnection with capped, jittered backoff — forever,
// because a kiosk has nobody to press a button.
//
// Given a ClockSync (clock.js), the pings also follow the server's shared clock: where
// `ready.clock` says the server offers one, each pong's `server_time` is a sample, taken
// in a burst at connect (so the estimate is ready within a second), then four a second
// for a while (the filter is only as good as the fastest exchanges it has seen, and a
// kiosk may be asked to play in step seconds after it connects), then one a second.

import { decode, encode } from "../vendor/msgpack/index.mjs";

const PING_EVERY_MS = 5000;
const PING_TIMEOUT_MS = 12000;
const PING_BURST = 8; // pings 100 ms apart after a `ready` that offers a clock
const PING_BURST_MS = 100;
const PING_SETTLE_MS = 250; // for the first PING_SETTLE_FOR_MS after the burst
const PING_SETTLE_FOR_MS = 15000;
const PING_SYNC_MS = 1000;
const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 10000;

export function wsUrl(path = "/ws") {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  return `${proto}//${location.host}${path}`;
}

export class Connection extends EventTarget {
  // hello(): the `hello` message to send on each connect (settings, token).
  // clock: a ClockSync to feed from pongs (null: pings only keep the link alive).
  constructor({ url = wsUrl(), hello = () => ({}), clock = null } = {}) {
    super();
    this.url = url;
    this.hello = hello;
    this.clock = clock;
    this.ws = null;
    this.state = "idle"; // connecting | ready | reconnecting | unauthorized
    this.ready = null; // the last `ready`
    this.attempt = 0;
    this.retryAt = 0;
    this.rttMs = null;
    this.closeInfo = null;
    this._retryTimer = null;
    this._pingTimer = null;
    this._settleTimer = null; // ends the first, faster sampling
    this._lastPong = 0;
    this._syncing = false; // this socket's pings sample the server's clock
  }

  connect() {
    clearTimeout(this._retryTimer);
    this._setState("connecting");
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (err) {
      this._scheduleRetry();
      return;
    }
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => {
      this._lastPong = performance.now();
      this._syncing = false;
      this._sendRaw({ type: "hello", v: 1, ...this.hello() });
      this._pingEvery(PING_EVERY_MS);
    };
    ws.onmessage = (e) => this._onFrame(e.data);
    ws.onclose = (e) => this._onClose(ws, e);
    ws.onerror = () => {}; // onclose follows and carries the code
  }

  // Reconnect now instead of waiting out the backoff.
  retryNow() {
    if (this.state === "reconnecting" || this.state === "unauthorized") {
      this.attempt = 0;
      this.connect();
    }
  }

  // Sends one message; false when there is no open connection to send it on.
  send(msg) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN || this.state !== "ready") return false;
    return this._sendRaw(msg);
  }

  // Re-sends `hello` (new settings); the server answers with a fresh `ready`.
  rehello() {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this._sendRaw({ type: "hello", v: 1, ...this.hello() });
  }

  _sendRaw(msg) {
    this.ws.send(encode(msg));
    return true;
  }

  _ping() {
    // A socket already closing (its close event not yet here) takes no ping: the faster
    // sampling after a connect made that window easy to hit, and the browser logs an error.
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    if (performance.now() - this._lastPong > PING_TIMEOUT_MS) {
      // No pong for too long: the server or the network is gone without a FIN.
      this.ws.close(4000, "ping timeout");
      this._onClose(this.ws, { code: 4000, reason: "ping timeout" });
      return;
    }
    this._sendRaw({ type: "ping", t: this._localMs() });
  }

  _pingEvery(ms) {
    clearInterval(this._pingTimer);
    this._pingTimer = setInterval(() => this._ping(), ms);
  }

  // The first `ready` of a socket that offers a clock starts sampling it. The samples of
  // an earlier socket are dropped: behind a load balancer it may have been another
  // instance, whose clock need not be this one's.
  _startSync() {
    if (this._syncing || !this.clock) return;
    this._syncing = true;
    this.clock.reset();
    clearInterval(this._pingTimer);
    let sent = 0;
    const burst = () => {
      if (this.ws === null || this.ws.readyState !== WebSocket.OPEN) return;
      this._ping();
      if (++sent < PING_BURST) this._pingTimer = setTimeout(burst, PING_BURST_MS);
      else this._settle();
    };
    burst();
  }

  _settle() {
    this._pingEvery(PING_SETTLE_MS);
    const ws = this.ws;
    clearTimeout(this._settleTimer);
    this._settleTimer = setTimeout(() => {
      if (this.ws === ws && this._syncing) this._pingEvery(PING_SYNC_MS);
    }, PING_SETTLE_FOR_MS);
  }

  _localMs() {
    return this.clock ? this.clock.localMs() : performance.now();
  }

  _onFrame(data) {
    if (typeof data === "string") return; // the protocol has none; ignore rather than crash
    let msg;
    try {
      msg = decode(new Uint8Array(data));
    } catch (err) {
      console.warn("rtts: undecodable frame", err);
      return;
    }
    if (msg.type === "ready") {
      this.ready = msg;
      this.attempt = 0;
      this._setState("ready");
      if (msg.clock) this._startSync();
    } else if (msg.type === "pong") {
      this._lastPong = performance.now();
      if (typeof msg.t === "number") {
        const now = this._localMs();
        this.rttMs = now - msg.t;
        if (this._syncing && typeof msg.server_time === "number") this.clock.add(msg.t / 1000, msg.server_time, now / 1000);
      }
    }
    this.dispatchEvent(new CustomEvent("message", { detail: msg }));
  }

  _onClose(ws, e) {
    if (ws !== this.ws) return; // an old socket we already gave up on
    clearInterval(this._pingTimer); // also clears the burst's timeout: one pool of ids
    clearTimeout(this._settleTimer);
    this.ws = null;
    this.closeInfo = { code: e.code, reason: e.reason || "" };
    this._scheduleRetry(e.code === 1008 ? "unauthorized" : "reconnecting");
    this.dispatchEvent(new CustomEvent("closed", { detail: this.closeInfo }));
  }

  _scheduleRetry(state = "reconnecting") {
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** this.attempt);
    const delay = base * (0.8 + 0.4 * Math.random()); // jitter: a restarted server is not stampeded
    this.attempt++;
    this.retryAt = performance.now() + delay;
    this._setState(state);
    this._retryTimer = setTimeout(() => this.connect(), delay);
  }

  _setState(state) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state } }));
  }
}
