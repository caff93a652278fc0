/**
 * The vocabulary's byte strings, which the engine needs once for stop-string
 * detection, read from a Hugging Face `tokenizer.json` with a byte-level BPE
 * model (GPT-2, Qwen2/2.5/3, Llama 3): token strings there spell bytes with
 * GPT-2's printable byte alphabet; added (special) tokens are their UTF-8 text.
 */

/** GPT-2's bytes_to_unicode table inverted: code point -> byte. */
function byteDecoder(): Map<number, number> {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const decoder = new Map<number, number>();
  printable.forEach((b) => decoder.set(b, b));
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!printable.includes(b)) decoder.set(256 + n++, b);
  }
  return decoder;
}

/** The minimal tokenizer.json shape this reads. */
export interface TokenizerJson {
  model: { type?: string; vocab: Record<string, number> };
  added_tokens?: { id: number; content: string }[];
}

/**
 * Bytes of every token id in `0 .. size-1` (ids without a token get an empty
 * entry). `size` defaults to one past the largest id; pass the model's
 * `vocab_size` so padded embedding rows are covered.
 */
export function byteLevelVocab(tokenizer: TokenizerJson, size?: number): Uint8Array[] {
  const decoder = byteDecoder();
  const added = tokenizer.added_tokens ?? [];
  // A loop, not Math.max(...ids): spreading a 151k-entry vocabulary overflows the call stack.
  let maxId = -1;
  for (const id of Object.values(tokenizer.model.vocab)) if (id > maxId) maxId = id;
  for (const t of added) if (t.id > maxId) maxId = t.id;
  const pieces: Uint8Array[] = Array.from({ length: Math.max(size ?? 0, maxId + 1) }, () => new Uint8Array(0));
  for (const [token, id] of Object.entries(tokenizer.model.vocab)) {
    const bytes: number[] = [];
    for (const ch of token) {
      const b = decoder.get(ch.codePointAt(0) ?? -1);
      if (b === undefined) {
        bytes.push(...Buffer.from(ch, "utf8")); // not byte-level: keep the text as UTF-8
      } else {
        bytes.push(b);
      }
    }
    pieces[id] = Uint8Array.from(bytes);
  }
  for (const t of added) pieces[t.id] = new Uint8Array(Buffer.from(t.content, "utf8"));
  return pieces;
}
