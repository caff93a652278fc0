/** The arithmetic of the tour's service, in a module of its own to show imports between service files. */

/** x². */
export function squareOf(x: number): number {
  return x * x;
}

/** The sum of `xs`. */
export function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}
