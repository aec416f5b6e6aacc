// Reconnect backoff: exponential with jitter, capped so that a dropped client comes back within
// the gateway's resume hold.

export interface BackoffOptions {
  /** First retry delay. */
  initialDelayMs: number;
  /** Cap on the delay. */
  maxDelayMs: number;
  /** Growth per failed attempt. */
  multiplier: number;
  /** 0 … 1: the delay is drawn uniformly from [d·(1−jitter), d]. */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = {
  initialDelayMs: 250,
  maxDelayMs: 10_000,
  multiplier: 2,
  jitter: 0.5,
};

/** Delay before retry number `attempt` (0-based): exponential, capped, with jitter. */
export function backoffDelay(attempt: number, opts: BackoffOptions = DEFAULT_BACKOFF, rand: () => number = Math.random): number {
  const exp = opts.initialDelayMs * Math.pow(opts.multiplier, Math.max(0, attempt));
  const capped = Math.min(opts.maxDelayMs, exp);
  const j = Math.min(1, Math.max(0, opts.jitter));
  return Math.round(capped * (1 - j * rand()));
}

/**
 * Delay before reconnect attempt `attempt`: the backoff, but while the gateway may still hold our
 * sessions' output (`sinceDropMs` < `holdMs`, its `flow.resumeHoldMs`) capped at a quarter of
 * the hold, so a client comes back in time to resume byte-exact. Jitter applies after the cap.
 */
export function reconnectDelay(
  attempt: number,
  opts: BackoffOptions,
  rand: () => number,
  holdMs: number,
  sinceDropMs: number,
): number {
  if (holdMs > 0 && sinceDropMs < holdMs) {
    opts = { ...opts, maxDelayMs: Math.min(opts.maxDelayMs, holdMs / 4) };
  }
  return backoffDelay(attempt, opts, rand);
}
