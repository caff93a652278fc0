/**
 * A request outside an episode session (the run's key: a notebook cell's
 * first try, an evaluation script) is encoded the way a session would hold
 * the same conversation, not as one string: a session encodes its first
 * prompt whole, keeps each reply's ids as sampled (a reply ends at the
 * model's end-of-turn token) and encodes only the text rendered after it
 * (the tool results, the next generation prompt) alone. Encoding the whole
 * rendering at once can merge tokens across those boundaries (a vocabulary
 * with an added token for `<|im_end|>\n<|im_start|>user\n` does), so the
 * same messages would reach the policy as ids it never trained on.
 *
 * Each assistant message's reply is its rendering from the end of the
 * prompt before it up to and including the first end-of-turn string, encoded
 * alone (what the policy samples, as the warm start's demonstrations encode
 * it). Where the template renders earlier turns differently later (Qwen3
 * drops earlier reasoning) the encoding restarts from the whole rendered
 * prompt there, as a session starts a new sequence.
 */
import type { TemplateMessage } from "../text/chat-messages.js";
import type { TextTokenizer } from "../text/tokenizer.js";

/** Renders `messages` with the request's tools (`generation`: ending where the assistant speaks). */
export type RenderMessages = (messages: readonly TemplateMessage[], generation: boolean) => Promise<string> | string;

/** The reply part of `rendered` (the text after the prompt): up to and including the first end-of-turn string, else all of it. */
function replyPart(rendered: string, ends: readonly string[]): string {
  let cut = rendered.length;
  for (const e of ends) {
    const at = rendered.indexOf(e);
    if (at >= 0) cut = Math.min(cut, at + e.length);
  }
  return rendered.slice(0, cut);
}

/** The ids of prompt `text` (the rendering of `messages` with the generation prompt, plus any forced start) as an episode session holding the same conversation would have them (see the file's header). */
export async function encodeAsSession(tokenizer: TextTokenizer, messages: readonly TemplateMessage[], text: string, render: RenderMessages): Promise<number[]> {
  const ends = tokenizer.eosIds.map((id) => tokenizer.decode([id])).filter((s) => s.length > 0);
  let held: { text: string; ids: number[] } | undefined;
  for (let i = 0; i < messages.length; i++) {
    if (messages[i]!.role !== "assistant") continue;
    const prompt = await render(messages.slice(0, i), true);
    if (held && prompt.startsWith(held.text)) {
      held.ids.push(...tokenizer.encode(prompt.slice(held.text.length)));
      held.text = prompt;
    } else {
      held = { text: prompt, ids: tokenizer.encode(prompt) };
    }
    const withReply = await render(messages.slice(0, i + 1), false);
    if (!withReply.startsWith(prompt)) {
      held = undefined;
      continue;
    }
    const reply = replyPart(withReply.slice(prompt.length), ends);
    held.ids.push(...tokenizer.encode(reply));
    held.text += reply;
  }
  if (held && text.startsWith(held.text)) return [...held.ids, ...tokenizer.encode(text.slice(held.text.length))];
  return tokenizer.encode(text);
}
