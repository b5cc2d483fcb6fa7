// The kiosk: an unattended screen that speaks announcements and shows, in large type,
// the sentence being heard. Configured by URL parameters:
//
//   voice=ID  lang=CODE  speed=X  rate=HZ  token=SECRET
//   queue=TEXT        an announcement; repeat the parameter for more. A leading "!"
//                     makes it high priority ("!Fire drill now.").
//   repeat=SECONDS    speak the URL queue again this long after it finishes (0: once)
//   gap=MS            silence between announcements (default 800)
//   title=TEXT        the heading in the corner
//   channel=NAME      hear the announcements published to this channel (repeat for more);
//                     subscribed again on every reconnection, with what was missed shown
//   words=0           caption by sentence only; by default the kiosk asks for word timing
//                     (its own announcements and its channels') and lights the word heard
//   sync=0            play a channel's announcements as soon as they come; by default the
//                     kiosk follows the server's clock and plays each at its `play_at`,
//                     in step with every other kiosk on the channel
//   output_ms=N       the loudspeaker's latency beyond what the browser reports (an HDMI
//                     or Bluetooth sink often reports none): heard N ms earlier to match
//   clock_skew_ppm=N  tests only: this page's clock runs N ppm fast, as a cheap crystal
//
// More announcements come from window.rtts.announce(text, {priority: "high"}) or a
// same-origin postMessage({type: "rtts-announce", text, priority}). A high-priority
// announcement interrupts a normal one (`speak` with `interrupt: true`); the interrupted
// one is spoken again, from its start, afterwards; so is one cut by a channel's
// high-priority announcement.

import { RttsClient } from "./client.js";
import { clearWordData, renderCaption } from "./words.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const number = (name, fallback) => {
  const v = Number(params.get(name));
  return params.has(name) && Number.isFinite(v) ? v : fallback;
};

const MAX_ATTEMPTS = 3; // an announcement cut off by a lost or busy server is retried this often
const BUSY_RETRY_MS = 3000;
const gapMs = number("gap", 800);
const repeatS = number("repeat", 0);

const client = new RttsClient({
  token: params.get("token") || "",
  voice: params.get("voice") || "",
  lang: params.get("lang") || "",
  speed: number("speed", 1),
  sampleRate: number("rate", 24000),
  format: params.get("format") || "pcm16", // "opus" for thin links (WebCodecs; pcm16 where missing)
  words: params.get("words") !== "0", // in `hello`, so a channel's announcements carry them too
  sync: params.get("sync") !== "0",
  outputMs: number("output_ms", 0),
  clockSkewPpm: number("clock_skew_ppm", 0),
});

const urlQueue = params.getAll("queue").map(parseItem).filter((item) => item.text);
const channels = params.getAll("channel").map((c) => c.trim()).filter(Boolean);
const queue = { high: [], normal: [] };
let current = null; // {id, text, priority, attempts}
let seq = 0;
let pumpTimer = null;
let repeatTimer = null;

function parseItem(raw) {
  const text = raw.trim();
  return text.startsWith("!") ? { text: text.slice(1).trim(), priority: "high" } : { text, priority: "normal" };
}

// Queue an announcement. Returns its id.
function announce(text, { priority = "normal" } = {}) {
  const item = { id: `k${++seq}`, text: String(text).trim(), priority: priority === "high" ? "high" : "normal", attempts: 0 };
  if (!item.text) return null;
  queue[item.priority].push(item);
  if (item.priority === "high" && current && current.priority !== "high" && client.conn.state === "ready") {
    interrupt();
  } else {
    schedulePump(0);
  }
  showQueue();
  return item.id;
}

// A high-priority announcement cuts in: the current one goes back to the front of the
// line (to be spoken again in full), and the server cancels it as it starts the new one.
function interrupt() {
  const cut = current;
  cut.id = `k${++seq}`; // a fresh id: the old one is still live until the server ends it
  queue.normal.unshift(cut);
  current = queue.high.shift();
  startCurrent(true);
}

function schedulePump(delay) {
  clearTimeout(pumpTimer);
  pumpTimer = setTimeout(pump, delay);
}

function pump() {
  if (current || client.conn.state !== "ready") return;
  current = queue.high.shift() || queue.normal.shift() || null;
  if (!current) {
    showQueue();
    scheduleRepeat();
    return;
  }
  startCurrent(false);
}

function startCurrent(interrupting) {
  current.attempts++;
  const id = client.speak(current.text, { interrupt: interrupting, id: current.id });
  if (id === null) {
    queue[current.priority].unshift(current); // not connected after all: try again later
    current = null;
  }
  showCaption();
  showQueue();
}

function scheduleRepeat() {
  if (!repeatS || !urlQueue.length || repeatTimer) return;
  repeatTimer = setTimeout(() => {
    repeatTimer = null;
    for (const item of urlQueue) announce(item.text, item);
  }, repeatS * 1000);
}

function finishCurrent(id) {
  if (!current || current.id !== id) return;
  current = null;
  showCaption();
  schedulePump(gapMs);
}

// The current announcement is over once its audio has been played out, or at its
// `end` when it produced no audio at all (an error, or cancelled before any sound).
client.addEventListener("sounddone", (e) => finishCurrent(e.detail.id));
client.addEventListener("end", (e) => {
  const rec = e.detail;
  if (!current || current.id !== rec.id) return;
  if (rec.reason === "disconnected") {
    // The server went away mid-announcement: say it again, whole, when it is back.
    if (current.attempts < MAX_ATTEMPTS) {
      current.id = `k${++seq}`;
      queue[current.priority].unshift(current);
    }
    current = null;
    showCaption();
  } else if (rec.error && rec.error.code === "busy" && current.attempts < MAX_ATTEMPTS) {
    // Admission control turned it away: the server is saturated now, not broken.
    current.id = `k${++seq}`;
    queue[current.priority].unshift(current);
    current = null;
    schedulePump(BUSY_RETRY_MS);
  } else if (rec.sent === 0) {
    finishCurrent(rec.id);
  }
});
client.addEventListener("ready", () => schedulePump(0));

// A channel's announcement begins. The server queues this page's own announcements behind
// it; a high-priority one has cut the one playing, which goes back to the front of the line.
client.addEventListener("announcement", (e) => {
  if (e.detail.priority === "high" && current) {
    const cut = current;
    cut.id = `k${++seq}`;
    queue.normal.unshift(cut);
    current = null;
    schedulePump(0);
  }
  showCaption();
  showQueue();
});
client.addEventListener("subscribed", (e) => {
  const { channel, missed } = e.detail;
  if (missed > 0) problem(`Missed ${missed} announcement${missed > 1 ? "s" : ""} on ${channel} while offline`);
});

// ------------------------------------------------------------ screen

const caption = $("caption");
const prev = $("prev");
let last = { text: "", lang: null }; // the caption shown last

// Text in its language (a mark's), so the browser picks Japanese or Chinese forms of Han characters.
function show(el, text, lang) {
  el.textContent = text;
  if (lang) el.lang = lang;
  else el.removeAttribute("lang");
}

function showCaption() {
  const cap = client.caption;
  const local = Boolean(cap && current && cap.id === current.id);
  const announced = cap ? client.utterances.get(cap.id) : null;
  if (cap && (local || (announced && announced.channel))) {
    if (cap.parts) {
      // Word timing: the announcement's own text, sentence by sentence, the word heard lit.
      if (last.text !== cap.text) {
        if (last.text) show(prev, last.text, last.lang);
        last = { text: cap.text, lang: cap.lang };
      }
      renderCaption(caption, cap);
      if (cap.lang) caption.lang = cap.lang;
      else caption.removeAttribute("lang");
    } else if (caption.textContent !== cap.text) {
      clearWordData(caption);
      if (last.text && last.text !== cap.text) show(prev, last.text, last.lang);
      show(caption, cap.text, cap.lang);
      last = { text: cap.text, lang: cap.lang };
    }
    caption.classList.remove("idle");
    caption.classList.toggle("high", (local ? current.priority : announced.priority) === "high");
    // The voice heard now: the server picks one by the text's language, so a Chinese
    // announcement is not spoken by the voice the URL (or the server's default) names.
    if (cap.voice) showVoice(cap.voice);
  } else if (!current) {
    clearWordData(caption);
    show(caption, idleText(), null);
    caption.classList.add("idle");
    caption.classList.remove("high");
    show(prev, last.text, last.lang);
  }
}

// Between two queued announcements (the gap, one not heard yet, or while offline) the
// screen says one is coming, as its footer's "Next:" does, not that it waits for any.
function idleText() {
  return current || queue.high.length || queue.normal.length ? "Next announcement shortly" : "Waiting for announcements";
}

function showVoice(id) {
  const text = `Voice: ${client.voiceName(id)}`;
  if ($("voice").textContent !== text) $("voice").textContent = text; // a caption event comes per word
}

client.addEventListener("caption", showCaption);
// The playback position the highlight was chosen by, for the tests.
client.addEventListener("heard", (e) => {
  if (caption.dataset.utterance === e.detail.id) caption.dataset.pos = String(e.detail.pos);
});

function showQueue() {
  const waiting = [...queue.high, ...queue.normal];
  $("next").textContent = waiting.length ? `Next: ${waiting[0].text}${waiting.length > 1 ? ` (+${waiting.length - 1} more)` : ""}` : "";
  if (caption.classList.contains("idle")) caption.textContent = idleText();
}

const status = $("status");
const down = $("down");

function showConnection() {
  const state = client.conn.state;
  status.dataset.state = state;
  if (state === "ready") {
    status.textContent = "Connected";
    down.hidden = true;
    return;
  }
  status.textContent = state === "connecting" ? "Connecting…" : "Server unreachable";
  if (state === "connecting" && client.conn.attempt === 0) return; // first connect: no alarm yet
  const secs = Math.max(0, Math.ceil((client.conn.retryAt - performance.now()) / 1000));
  const what = state === "unauthorized" ? "The server refused this kiosk's token" : "Announcement server unreachable";
  const retry = state === "connecting" ? "reconnecting now…" : `retrying in ${secs} s`;
  down.replaceChildren(what, Object.assign(document.createElement("small"), {
    textContent: `Announcements resume automatically when it is back — ${retry} (attempt ${client.conn.attempt}).`,
  }));
  down.hidden = false;
}

client.addEventListener("state", showConnection);
client.addEventListener("ready", (e) => {
  const ready = e.detail;
  const asked = client.settings.voice;
  if (asked && !ready.voices.some((v) => v.id === asked)) {
    // A typo in the URL must not leave an unattended screen mute: the server chooses.
    problem(`Unknown voice "${asked}"; the server picks one by language`);
    client.configure({ voice: "", lang: "" });
  }
  // Until a voice is heard, the one asked for; with none, the server picks by language.
  if (client.settings.voice && !client.caption) showVoice(client.settings.voice);
  $("channel").textContent = channels.length ? `Channel: ${channels.join(", ")}` : "";
});
client.addEventListener("error", (e) => {
  console.warn("rtts kiosk:", e.detail.code, e.detail.message);
  problem(`${e.detail.code}: ${e.detail.message}`);
});

let problemTimer = null;
function problem(text) {
  const el = $("problem");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(problemTimer);
  problemTimer = setTimeout(() => { el.hidden = true; }, 15000);
}

// Browsers hold audio until a user gesture unless started with an autoplay policy that
// allows it (see docs/browser.md, "The kiosk"); say so on screen instead of staying silent.
const unmute = $("unmute");
client.addEventListener("audiostate", (e) => { unmute.hidden = e.detail.state !== "suspended"; });
function resume() {
  client.player.resume().catch(() => {});
}
unmute.addEventListener("click", resume);
document.addEventListener("keydown", resume);

function tick() {
  $("clock").textContent = new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (client.conn.state !== "ready") showConnection();
}
setInterval(tick, 1000);
tick();

if (params.get("title")) $("title").textContent = params.get("title");

window.addEventListener("message", (e) => {
  if (e.origin !== location.origin || !e.data || e.data.type !== "rtts-announce") return;
  announce(e.data.text, { priority: e.data.priority });
});

// window.rtts: the client's figures (window.rtts.stats) plus the kiosk's queue.
client.announce = announce;
client.kiosk = { queue, get current() { return current; } };
window.rtts = client;

for (const item of urlQueue) announce(item.text, item);
for (const channel of channels) client.subscribe(channel);
client.start();
showConnection();
