/**
 * The calculator tool's arithmetic: a parser of our own for numbers, + − × ÷
 * and parentheses (no `eval`, no names, no calls), with bounded length and
 * nesting, evaluating exactly on integers. What the policy writes between
 * `<calc>` and `</calc>` is untrusted text; every way it can be wrong is an
 * `ExpressionError` whose message is what the tool answers (inserted as the
 * observation, so the policy reads why), never an exception past the tool.
 *
 * Grammar (spaces anywhere between tokens):
 *   expr   := term (("+" | "-") term)*
 *   term   := factor (("*" | "x" | "×" | "/" | "÷") factor)*
 *   factor := "-" factor | number | "(" expr ")"
 *   number := digits (a whole number; at most MAX_DIGITS digits)
 * Division must be exact (the tasks are about whole things); a result past
 * ±MAX_MAGNITUDE is refused rather than rounded.
 */

/** Characters an expression may have at most. */
export const MAX_LENGTH = 200;
/** Parentheses nested at most. */
export const MAX_DEPTH = 8;
/** Digits of one number at most. */
export const MAX_DIGITS = 9;
/** Largest magnitude of any value along the way (exact in a double: < 2^53). */
export const MAX_MAGNITUDE = 1e12;

/** Why an expression has no value; the message is the tool's answer. */
export class ExpressionError extends Error {
  override name = "ExpressionError";
}

type Token = { kind: "num"; value: number; at: number } | { kind: "op"; op: string; at: number };

const OPS: Record<string, string> = { "+": "+", "-": "-", "−": "-", "*": "*", x: "*", "×": "*", "/": "/", "÷": "/", "(": "(", ")": ")" };

function tokenize(text: string): Token[] {
  if (text.length > MAX_LENGTH) throw new ExpressionError(`too long: ${text.length} characters (at most ${MAX_LENGTH})`);
  const out: Token[] = [];
  for (let i = 0; i < text.length; ) {
    const c = text[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (/[0-9]/.test(c)) {
      let j = i;
      while (j < text.length && /[0-9]/.test(text[j]!)) j++;
      if (j - i > MAX_DIGITS) throw new ExpressionError(`number too long at ${i + 1}: at most ${MAX_DIGITS} digits`);
      out.push({ kind: "num", value: Number(text.slice(i, j)), at: i });
      i = j;
      continue;
    }
    const op = OPS[c];
    if (op === undefined) throw new ExpressionError(`unexpected '${c}' at ${i + 1}: only numbers, + - * / and parentheses`);
    out.push({ kind: "op", op, at: i });
    i++;
  }
  if (out.length === 0) throw new ExpressionError("empty expression");
  return out;
}

function checked(v: number): number {
  if (!Number.isFinite(v) || Math.abs(v) > MAX_MAGNITUDE) throw new ExpressionError(`result too large (beyond ${MAX_MAGNITUDE})`);
  return v;
}

/** The exact integer value of `text`, or an ExpressionError saying what is wrong. */
export function evaluate(text: string): number {
  const tokens = tokenize(text);
  let pos = 0;
  const peek = (): Token | undefined => tokens[pos];
  const isOp = (t: Token | undefined, ...ops: string[]): boolean => t?.kind === "op" && ops.includes(t.op);

  const expr = (depth: number): number => {
    let v = term(depth);
    while (isOp(peek(), "+", "-")) {
      const op = (tokens[pos++] as { op: string }).op;
      const r = term(depth);
      v = checked(op === "+" ? v + r : v - r);
    }
    return v;
  };
  const term = (depth: number): number => {
    let v = factor(depth);
    while (isOp(peek(), "*", "/")) {
      const t = tokens[pos++] as { op: string; at: number };
      const r = factor(depth);
      if (t.op === "*") v = checked(v * r);
      else {
        if (r === 0) throw new ExpressionError(`division by zero at ${t.at + 1}`);
        if (v % r !== 0) throw new ExpressionError(`${v} / ${r} is not a whole number`);
        v = checked(v / r);
      }
    }
    return v;
  };
  const factor = (depth: number): number => {
    const t = peek();
    if (t === undefined) throw new ExpressionError("the expression ends where a number is expected");
    if (isOp(t, "-")) {
      pos++;
      return checked(-factor(depth));
    }
    if (t.kind === "num") {
      pos++;
      return t.value;
    }
    if (isOp(t, "(")) {
      if (depth + 1 > MAX_DEPTH) throw new ExpressionError(`too deeply nested (at most ${MAX_DEPTH} parentheses)`);
      pos++;
      const v = expr(depth + 1);
      if (!isOp(peek(), ")")) throw new ExpressionError(`missing ')' for the '(' at ${t.at + 1}`);
      pos++;
      return v;
    }
    throw new ExpressionError(`unexpected '${(t as { op: string }).op}' at ${t.at + 1}`);
  };

  const v = expr(0);
  const rest = peek();
  if (rest !== undefined) throw new ExpressionError(`unexpected ${rest.kind === "num" ? `number ${rest.value}` : `'${rest.op}'`} at ${rest.at + 1}`);
  return Object.is(v, -0) ? 0 : v;
}
