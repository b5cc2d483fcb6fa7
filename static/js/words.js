// Word timing on the pages: which word is being heard, and the caption around it, from
// the server's `words` messages (docs/protocol.md). Pure functions (and one renderer): the
// client calls them with the utterance's text, its words so far and the playback position.
//
// A word's text_start/text_end count Unicode code points of the utterance's text, while a
// JS string indexes UTF-16 code units: an emoji or a Han character beyond the BMP (𠮷) is
// one code point and two units, so spans are taken from an array of code points.

// Where a sentence ends: its punctuation, then any closing quotes or brackets; a Latin
// full stop only before a space or the end ("$23.50" in words not timed yet goes on).
const SENTENCE_END = /[.!?…]+["'”’)\]]*(?=\s|$)|[。！？]+[」』）"'”’)\]]*/u;
const ENDS_SENTENCE = /[.!?。！？…]["'”’)\]」』）]*$/u;
// What the markup subset looks like (a tag that starts with a letter or "/"); "a < b"
// and "<3" are text, as the server reads them.
const TAG = /<\/?[A-Za-z][^<>]*>/g;
const ENTITIES = { "&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&apos;": "'" };

// The word being heard at sample `pos`: the last one that has started, so the word just
// said stays lit through the pause after it (no flicker between words). -1 before the
// first. Words come in order of their start.
export function wordAt(words, pos) {
  let lo = 0;
  let hi = words.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (words[mid].start <= pos) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

// What the caption shows of the client's own text: markup dropped, entities decoded.
export function shown(text) {
  return text.replace(TAG, "").replace(/&(lt|gt|amp|quot|apos);/g, (e) => ENTITIES[e]);
}

// The code point just past the end of the sentence that word `j` closes, or -1 when the
// sentence goes on after it. Only punctuation outside the words counts ("$23.50" and
// "10.30" are one word each), unless the word ends with it. `cps` is the text's code points.
function sentenceEndAfter(cps, words, j) {
  const w = words[j];
  if (ENDS_SENTENCE.test(w.text)) return w.text_end;
  // The text up to the next word; after the last word known so far, the rest of the text
  // (its first sentence end is where this sentence ends, whatever words come later).
  const next = j + 1 < words.length ? words[j + 1].text_start : cps.length;
  // A tag's own dots (<break time="1.5s"/>) end nothing: blanked, code point for code point.
  const gap = cps.slice(w.text_end, next).join("").replace(TAG, (t) => " ".repeat(Array.from(t).length));
  const m = SENTENCE_END.exec(gap);
  return m ? w.text_end + Array.from(gap.slice(0, m.index + m[0].length)).length : -1;
}

// The sentence around word `index`: [start, end) in code points, and its first and last
// word: the caption's unit (a kiosk shows the sentence being heard, not the whole text).
export function sentenceOf(cps, words, index) {
  let first = index;
  while (first > 0 && sentenceEndAfter(cps, words, first - 1) < 0) first--;
  let last = index;
  while (last + 1 < words.length && sentenceEndAfter(cps, words, last) < 0) last++;
  const start = first > 0 ? sentenceEndAfter(cps, words, first - 1) : 0;
  const stop = sentenceEndAfter(cps, words, last);
  return { start, end: stop < 0 ? cps.length : stop, first, last };
}

// The caption of the sentence around word `now`, built from the client's text (its
// spacing and punctuation as written; nothing added between CJK words): a list of parts
// {text, word, said, now} where `word` is the word's index (null for the text between
// words). `now` is the word being heard (-1: none yet, the first sentence unlit); the words
// before it are marked said.
export function captionParts(cps, words, now) {
  const s = sentenceOf(cps, words, Math.max(now, 0));
  const parts = [];
  // The text between words (spaces, punctuation) counts as said once the word after it is.
  const between = (from, to, said) => {
    if (to > from) parts.push({ text: shown(cps.slice(from, to).join("")), word: null, said, now: false });
  };
  let at = s.start;
  for (let k = s.first; k <= s.last; k++) {
    const w = words[k];
    between(at, w.text_start, k <= now);
    parts.push({ text: shown(cps.slice(w.text_start, w.text_end).join("")), word: k, said: k < now, now: k === now });
    at = w.text_end;
  }
  // After the last word timed so far the rest of the sentence may be words still to come
  // (their timing not sent yet): said only if it is punctuation.
  const tail = cps.slice(at, s.end).join("");
  between(at, s.end, s.last <= now && !/[\p{L}\p{N}]/u.test(shown(tail)));
  // The spaces between this sentence and its neighbours are not the caption's.
  if (parts.length && parts[0].word === null) parts[0].text = parts[0].text.trimStart();
  if (parts.length && parts[parts.length - 1].word === null) parts[parts.length - 1].text = parts[parts.length - 1].text.trimEnd();
  return { parts: parts.filter((p) => p.text || p.word !== null), start: s.start, end: s.end, first: s.first, last: s.last };
}

// Renders caption parts into `el`: each word a <span class="word"> and the text between
// words a <span class="gap">, "said" once heard and "now" while heard; the highlighted
// word's index and span in the element's data attributes (the tests compare them with the
// `words` received).
export function renderCaption(el, caption) {
  const kind = (p) => `${p.word === null ? "gap" : "word"}${p.said ? " said" : ""}${p.now ? " now" : ""}`;
  const kids = el.children;
  const same = kids.length === caption.parts.length && el.childNodes.length === kids.length
    && caption.parts.every((p, i) => kids[i].textContent === p.text && kids[i].dataset.word === (p.word === null ? undefined : String(p.word)));
  if (same) {
    // The same sentence, the highlight moved on: only classes change, the nodes (and the
    // text's layout) stay.
    caption.parts.forEach((p, i) => { kids[i].className = kind(p); });
  } else {
    el.replaceChildren(...caption.parts.map((p) => {
      const span = document.createElement("span");
      span.className = kind(p);
      if (p.word !== null) span.dataset.word = String(p.word);
      span.textContent = p.text;
      return span;
    }));
  }
  const w = caption.word >= 0 ? caption.words[caption.word] : null;
  el.dataset.utterance = caption.id;
  el.dataset.word = String(caption.word);
  el.dataset.textStart = w ? String(w.text_start) : "";
  el.dataset.textEnd = w ? String(w.text_end) : "";
}

// The caption element back to plain text (a caption from marks, or none).
export function clearWordData(el) {
  for (const key of ["word", "textStart", "textEnd", "pos", "utterance"]) delete el.dataset[key];
}
