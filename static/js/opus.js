// The server's `format: "opus"`: one raw Opus packet per `audio` message, decoded here by
// WebCodecs' AudioDecoder. Browsers decode Opus at 48 kHz, so an Opus session asks the
// server for 48 kHz and plays what the decoder gives with no resampling.
// Where AudioDecoder or its Opus support is missing the client stays on pcm16.

export const OPUS_RATE = 48000;
const PRE_SKIP_48K = 312; // libopus' look-ahead: the first 6.5 ms decoded are its delay

export async function opusSupported() {
  if (typeof AudioDecoder === "undefined" || typeof EncodedAudioChunk === "undefined") return false;
  try {
    const { supported } = await AudioDecoder.isConfigSupported({
      codec: "opus", sampleRate: OPUS_RATE, numberOfChannels: 1,
    });
    return Boolean(supported);
  } catch {
    return false;
  }
}

// One utterance's packets, in order → Float32Array chunks through onSamples, with the
// encoder's look-ahead trimmed so that `pts` and `mark`s keep meaning the same sample.
export class OpusStream {
  constructor(rate, onSamples, onError) {
    this.rate = rate;
    this.onSamples = onSamples;
    this.onError = onError;
    this.skip = Math.round((PRE_SKIP_48K * rate) / 48000);
    this.decoder = new AudioDecoder({ output: (data) => this._output(data), error: (e) => onError(e) });
    this.decoder.configure({ codec: "opus", sampleRate: rate, numberOfChannels: 1 });
  }

  decode(data, pts) {
    if (this.decoder.state !== "configured") return;
    const timestamp = Math.round((pts * 1e6) / this.rate);
    this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp, data: data.slice() }));
  }

  // Resolves once every packet given so far has come out of onSamples.
  async finish() {
    if (this.decoder.state !== "configured") return;
    try {
      await this.decoder.flush();
    } finally {
      this.close();
    }
  }

  close() {
    if (this.decoder.state !== "closed") this.decoder.close();
  }

  _output(data) {
    if (data.sampleRate !== this.rate) {
      data.close();
      this.onError(new Error(`the Opus decoder gave ${data.sampleRate} Hz, not ${this.rate}`));
      return;
    }
    let samples = new Float32Array(data.numberOfFrames);
    data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
    data.close();
    if (this.skip > 0) {
      const cut = Math.min(this.skip, samples.length);
      samples = samples.slice(cut);
      this.skip -= cut;
    }
    if (samples.length) this.onSamples(samples);
  }
}
