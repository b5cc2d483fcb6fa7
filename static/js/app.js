// The try-it page: controls, live figures and history around one RttsClient.

import { RttsClient, watchReadyz } from "./client.js";
import { wavBlob } from "./wav.js";
import { clearWordData, renderCaption } from "./words.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const saved = loadSettings();

const client = new RttsClient({
  token: params.get("token") || saved.token || "",
  voice: params.get("voice") || saved.voice || "",
  lang: saved.lang || "",
  speed: Number(saved.speed || 1),
  generator: params.get("generator") || saved.generator || "",
  sampleRate: Number(params.get("rate") || saved.sampleRate || 24000),
  format: params.get("format") || saved.format || "pcm16",
  // Word timing (the caption follows each word): on unless switched off here or in the URL.
  words: (params.get("words") ?? (saved.words === false ? "0" : "1")) !== "0",
});
window.rtts = client; // the tests (and curious people) read window.rtts.stats

const els = {
  text: $("text"), voice: $("voice"), lang: $("lang"), speed: $("speed"), speedOut: $("speed-out"), generator: $("generator"),
  rate: $("rate"), format: $("format"), speak: $("speak"), stop: $("stop"), typealong: $("typealong"), download: $("download"),
  words: $("words"),
  caption: $("caption"), notice: $("notice"), conn: $("conn"), retry: $("retry"), token: $("token"),
  history: $("history"), connSettings: $("conn-settings"),
};

// ------------------------------------------------------------ settings

function loadSettings() {
  try {
    return JSON.parse(localStorage.getItem("rtts.settings") || "{}");
  } catch {
    return {};
  }
}

function saveSettings() {
  const s = client.settings;
  const keep = {
    voice: s.voice, lang: s.lang, speed: s.speed, generator: s.generator, sampleRate: s.sampleRate, format: s.format,
    token: s.token, words: s.words,
  };
  try {
    localStorage.setItem("rtts.settings", JSON.stringify(keep));
  } catch {
    // private mode: settings simply do not stick
  }
}

els.speed.value = client.settings.speed;
els.generator.value = ["student", "teacher"].includes(client.settings.generator) ? client.settings.generator : "";
els.rate.value = String(client.settings.sampleRate);
els.format.value = client.settings.format === "opus" ? "opus" : "pcm16";
els.token.value = client.settings.token;
els.words.checked = client.settings.words;
showSpeed();

function showSpeed() {
  els.speedOut.textContent = `${Number(els.speed.value).toFixed(2)}×`;
}

els.speed.addEventListener("input", () => {
  showSpeed();
  client.configure({ speed: Number(els.speed.value) });
  saveSettings();
});
els.voice.addEventListener("change", () => {
  client.configure({ voice: els.voice.value, lang: "" });
  fillLangs();
  saveSettings();
});
els.lang.addEventListener("change", () => {
  client.configure({ lang: els.lang.value });
  saveSettings();
});
els.generator.addEventListener("change", () => {
  client.configure({ generator: els.generator.value }); // for the next utterances
  saveSettings();
});
els.rate.addEventListener("change", async () => {
  if (client.live.size) await client.stop(); // audio of the old rate cannot go into the new context
  client.configure({ sampleRate: Number(els.rate.value) });
  saveSettings();
});
els.format.addEventListener("change", () => {
  // The next connection asks for it (Opus needs a browser check first): reload the page.
  client.configure({ format: els.format.value });
  saveSettings();
  location.reload();
});
els.words.addEventListener("change", () => {
  client.configure({ words: els.words.checked }); // a new `hello`: for the next utterances
  saveSettings();
});
els.token.addEventListener("change", () => {
  client.configure({ token: els.token.value.trim() });
  saveSettings();
  client.conn.retryNow();
});

// ------------------------------------------------------------ voices

// Optgroup titles for the language a voice was made for (the first of its langs).
const LANGUAGE_NAMES = {
  "en": "English (US)", "en-gb": "English (UK)", "zh": "Mandarin 中文", "ja": "Japanese 日本語",
  "es": "Spanish Español", "fr": "French Français", "it": "Italian Italiano", "pt-br": "Portuguese (Brazil) Português",
};

function voiceLabel(v, ready) {
  const name = v.name || v.id;
  // Some names say the gender already ("Hibari heart (American English, female)").
  const says = (word) => new RegExp(`\\b${word}\\b`, "i").test(name);
  const about = [v.gender && !says(v.gender) && v.gender, v.grade && `grade ${v.grade}`].filter(Boolean).join(", ");
  return `${name}${about ? ` (${about})` : ""}${v.id === ready.default_voice ? " — default" : ""}`;
}

// The models in memory, not every voice they hold: one Kokoro model speaks 27 voices,
// which listed one by one filled the panel. A model of one voice is shown by its id.
function modelsText(ids) {
  const voices = (client.conn.ready && client.conn.ready.voices) || [];
  const byEngine = new Map();
  for (const id of ids) {
    const v = voices.find((x) => x.id === id);
    const engine = v ? v.engine : id.split("/")[0];
    if (!byEngine.has(engine)) byEngine.set(engine, []);
    byEngine.get(engine).push(id);
  }
  return [...byEngine].map(([engine, some]) => (some.length === 1 ? some[0]
    : `${engine.charAt(0).toUpperCase()}${engine.slice(1)} (${some.length} voices)`)).join(", ");
}

function showLoaded(ids, none) {
  const el = $("f-loaded");
  el.textContent = ids.length ? modelsText(ids) : none;
  el.title = ids.join("\n"); // every voice id, on hover
}

function fillVoices(ready) {
  const current = client.settings.voice && ready.voices.some((v) => v.id === client.settings.voice)
    ? client.settings.voice : ready.default_voice;
  els.voice.replaceChildren();
  // Grouped by the language each voice was made for, in the order the server lists them.
  const groups = new Map();
  for (const v of ready.voices) {
    const lang = (v.langs && v.langs[0]) || "other";
    if (!groups.has(lang)) {
      const g = document.createElement("optgroup");
      g.label = LANGUAGE_NAMES[lang] || lang;
      g.dataset.lang = lang;
      groups.set(lang, g);
      els.voice.append(g);
    }
    groups.get(lang).append(new Option(voiceLabel(v, ready), v.id, false, v.id === current));
  }
  els.voice.disabled = false;
  client.configure({ voice: current });
  fillLangs();
}

function fillLangs() {
  const ready = client.conn.ready;
  const voice = ready && ready.voices.find((v) => v.id === els.voice.value);
  const keep = client.settings.lang;
  els.lang.replaceChildren(new Option("Auto (from the text)", ""));
  for (const code of (voice && voice.langs) || []) els.lang.append(new Option(code, code, false, code === keep));
  if (!els.lang.value) client.configure({ lang: "" });
}

// ------------------------------------------------------------ speak, stop, type along

let typing = null; // {id, sent} while a type-along utterance is open

function resumeAudio() {
  client.player.resume().catch(() => {});
}

function speak() {
  resumeAudio();
  const text = els.text.value.trim();
  if (!text) {
    notice("Type something to speak first.");
    els.text.focus();
    return;
  }
  const id = client.speak(text);
  if (id === null) notice("Not connected yet; try again in a moment.");
}

async function stop() {
  typing = null;
  await client.stop();
}

els.speak.addEventListener("click", speak);
els.stop.addEventListener("click", stop);

els.typealong.addEventListener("change", () => {
  const on = els.typealong.checked;
  // An unflushed utterance would hold back every later one on this connection.
  if (typing) client.flush(typing.id);
  typing = null;
  els.speak.disabled = on || client.conn.state !== "ready";
  els.text.value = "";
  els.text.placeholder = on ? "Start typing: each clause is spoken as soon as it is complete. Enter finishes." : "";
  $("text-hint").textContent = on ? "Enter finishes the utterance · Esc stops" : "Ctrl+Enter speaks · Esc stops";
  els.text.focus();
});

els.text.addEventListener("input", () => {
  if (!els.typealong.checked) return;
  resumeAudio();
  const value = els.text.value;
  if (!typing) typing = { id: client.newTypingId(), sent: "" };
  if (!value.startsWith(typing.sent)) {
    // Sent text cannot be taken back; only what is typed at the end is spoken.
    notice("Only text added at the end is spoken in type-along mode.", "info");
    typing.sent = value;
    return;
  }
  const delta = value.slice(typing.sent.length);
  if (!delta) return;
  if (client.append(typing.id, delta)) {
    typing.sent = value;
  } else if (client.utterances.has(typing.id)) {
    // That utterance is over (the server went away, or refused it): what is typed from
    // here on starts a new one.
    typing = { id: client.newTypingId(), sent: value };
  }
});

function finishTyping() {
  if (typing && client.flush(typing.id)) els.text.value = "";
  typing = null;
}

els.text.addEventListener("keydown", (e) => {
  if (els.typealong.checked && e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    finishTyping();
  } else if (!els.typealong.checked && e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    speak();
  }
});

document.addEventListener("keydown", (e) => {
  if (e.key === "Escape") {
    e.preventDefault();
    stop();
  }
});
document.addEventListener("pointerdown", resumeAudio);

els.download.addEventListener("click", () => {
  const last = client.last;
  if (!last || !last.chunks.length) return;
  const url = URL.createObjectURL(wavBlob(last.chunks, last.rate));
  const a = document.createElement("a");
  a.href = url;
  a.download = `rtts-${last.id}.wav`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
});

// ------------------------------------------------------------ connection state

const STATE_TEXT = {
  connecting: "Connecting…",
  ready: "Connected",
  reconnecting: "Server unreachable",
  unauthorized: "Token refused",
};

function showConnection() {
  const state = client.conn.state;
  let text = STATE_TEXT[state] || state;
  if (state === "reconnecting" || state === "unauthorized") {
    const secs = Math.max(0, Math.ceil((client.conn.retryAt - performance.now()) / 1000));
    text += ` — retrying in ${secs} s`;
  }
  els.conn.textContent = text;
  els.conn.dataset.state = state;
  els.retry.hidden = !(state === "reconnecting" || state === "unauthorized");
  $("f-conn").textContent = text;
  const ready = state === "ready";
  els.speak.disabled = !ready || els.typealong.checked;
  if (state === "unauthorized") els.connSettings.open = true;
}

client.addEventListener("state", showConnection);
setInterval(() => {
  if (client.conn.state !== "ready") showConnection();
}, 500);
els.retry.addEventListener("click", () => client.conn.retryNow());

client.addEventListener("ready", (e) => {
  fillVoices(e.detail);
  showLoaded(e.detail.loaded, "none yet");
  hideNotice();
});

client.addEventListener("start", (e) => {
  const wait = e.detail.expectedAudioMs;
  if (wait !== null && wait > 1000) notice(`Speech starts in about ${(wait / 1000).toFixed(1)} s: a voice is loading or other streams go first.`, "info");
});

client.addEventListener("error", (e) => {
  const err = e.detail;
  notice(`${err.code}: ${err.message}`);
});

const readyz = watchReadyz((body) => {
  if (!body) return; // the socket's state already says the server is down
  showLoaded(body.loaded, "none (loads on first use)");
  $("f-loading").textContent = body.loading.length ? body.loading.join(", ") : "—";
});
client.addEventListener("firstaudio", () => readyz.now());

// ------------------------------------------------------------ figures

let notices = 0;
function notice(text, kind = "error") {
  els.notice.textContent = text;
  els.notice.dataset.kind = kind;
  els.notice.hidden = false;
  const mine = ++notices;
  setTimeout(() => { if (mine === notices) hideNotice(); }, 6000);
}

function hideNotice() {
  els.notice.hidden = true;
}

const ms = (v) => (v === null || v === undefined ? "—" : `${Math.round(v)} ms`);
const percent = (part, whole) => `${((100 * part) / whole).toFixed(1)} %`;

// Who spoke it, from its `start` and `mark`s: the voice chosen above speaks only the
// languages it has (Hibari English alone); the server gives other text a voice of its own.
function voicesText(rec) {
  return rec.voices.length ? rec.voices.map((id) => client.voiceName(id)).join(", ") : "—";
}

// How much of it was played: known once the worklet has played (or dropped) its last
// sample, or once it was cut; until then it is still playing.
function playedText(rec) {
  if (!rec.sent) return "—";
  return rec.soundDone || rec.cancelled ? percent(rec.played, rec.sent) : "playing…";
}

function latest() {
  let rec = null;
  for (const r of client.utterances.values()) rec = r;
  return rec;
}

let scheduled = false;
function refresh() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    const st = client.stats;
    $("f-buffered").textContent = ms(st.bufferedMs);
    $("f-underruns").textContent = st.underruns
      ? `${st.underruns}, ${st.audibleUnderruns} audible (${Math.round(st.starvedMs)} ms)` : "0";
    $("f-rtt").textContent = client.conn.rttMs === null ? "—" : `${client.conn.rttMs.toFixed(1)} ms`;
    $("f-audio").textContent = `${st.audio}${st.sampleRate ? ` · ${st.sampleRate} Hz` : ""} · ${st.wireFormat}`;
    $("f-stop").textContent = ms(st.lastStopMs);
    const rec = latest();
    els.stop.disabled = !(client.live.size || st.bufferedMs > 0);
    els.download.disabled = !(client.last && client.last.chunks.length);
    if (!rec) return;
    $("f-ttfa").textContent = ms(rec.ttfaMs);
    $("f-sound").textContent = ms(rec.firstSoundMs);
    $("f-sttfa").textContent = ms(rec.serverTtfaMs);
    // A stream the server had no room for waits until one ends: say so, not just the estimate.
    $("f-wait").textContent = ms(rec.expectedAudioMs) + (rec.queued && !rec.sent ? " · waiting for room" : "");
    // Played of what came from the server, as the history's Played column says once
    // the sound is over (the worklet's `received`, counted at `end`, trails its messages).
    $("f-samples").textContent = rec.sent ? `${rec.played} of ${rec.sent} (${percent(rec.played, rec.sent)})` : "—";
    $("e-voice").textContent = voicesText(rec);
    $("e-reason").textContent = rec.reason ? rec.reason + (rec.error ? ` (${rec.error.code})` : "") : "speaking…";
    $("e-queue").textContent = rec.stats ? ms(rec.stats.queue_ms) : "—";
    $("e-audio").textContent = rec.stats ? ms(rec.stats.audio_ms) : "—";
    $("e-rtf").textContent = rec.stats ? rec.stats.rtf.toFixed(3) : "—";
    $("e-late").textContent = lateText(rec.stats);
  });
}

// The server's own count of the frames it sent late (end.stats.underruns, late_ms): beside
// the page's Underruns, it says whether a gap was the server's or this page's.
function lateText(stats) {
  if (!stats || stats.underruns === undefined) return "—";
  return stats.underruns ? `${stats.underruns} (${Math.round(stats.late_ms)} ms)` : "0";
}

for (const type of ["status", "state", "utterance", "start", "firstaudio", "end", "stopped", "sounddone", "audiostate"]) {
  client.addEventListener(type, refresh);
}

// The sentence being heard: from the marks, or with word timing word by word (the words
// heard so far marked, the one being heard lit).
client.addEventListener("caption", (e) => {
  const cap = e.detail;
  if (cap && cap.parts) {
    renderCaption(els.caption, cap);
  } else {
    clearWordData(els.caption);
    els.caption.textContent = cap ? cap.text : "";
  }
  if (cap && cap.lang) els.caption.lang = cap.lang;
  else els.caption.removeAttribute("lang");
});
// The playback position the highlight was chosen by, for the tests.
client.addEventListener("heard", (e) => { els.caption.dataset.pos = String(e.detail.pos); });

function historyRow(rec) {
  const tr = document.createElement("tr");
  tr.id = `h-${rec.id}`;
  const text = rec.text.length > 80 ? `${rec.text.slice(0, 77)}…` : rec.text;
  const cells = [
    text,
    rec.reason + (rec.error ? ` (${rec.error.code})` : ""),
    `${ms(rec.ttfaMs)} / ${ms(rec.serverTtfaMs)}`,
    rec.stats ? ms(rec.stats.audio_ms) : "—",
    rec.stats ? rec.stats.rtf.toFixed(3) : "—",
    playedText(rec),
  ];
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c;
    tr.append(td);
  }
  if (rec.voices.length) {
    tr.cells[0].append(Object.assign(document.createElement("small"), { className: "hint voice", textContent: voicesText(rec) }));
  }
  return tr;
}

function addHistory(rec) {
  const old = document.getElementById(`h-${rec.id}`);
  if (old) old.replaceWith(historyRow(rec));
  else els.history.prepend(historyRow(rec));
  for (const empty of els.history.querySelectorAll("tr.empty")) empty.remove();
  while (els.history.children.length > 20) els.history.lastChild.remove();
}

client.addEventListener("end", (e) => addHistory(e.detail));
// Played is final only once the worklet has played (or dropped) the last sample.
client.addEventListener("sounddone", (e) => {
  const rec = client.utterances.get(e.detail.id);
  if (rec && rec.reason) addHistory(rec);
});

$("kiosk-link").href = `/kiosk${client.settings.token ? `?token=${encodeURIComponent(client.settings.token)}` : ""}`;
client.start();
showConnection();
