// When output may skip zmodem.js's Sentry. The sentry copies every byte into arrays to look for
// the start of a ZMODEM header ("**" ZDLE "B"), which cost 15% of the page's time in a bulk
// output; most output cannot start a transfer, and goes to the terminal as it is.
import type * as Zmodem from 'zmodem.js/src/zmodem';

/** ZDLE, the third byte of every hex header's start. */
const ZDLE = 0x18;
/** What Sentry._parse keeps of the output it found no header in: its first bytes, this many. */
const SENTRY_KEEPS = 21;

/**
 * Reports whether bytes may go to the terminal without the sentry, with no transfer running:
 * only when neither bytes nor what the sentry holds from earlier output has a ZDLE, so no
 * header, whole or cut anywhere across outputs, can end in them. The sentry's state then
 * becomes exactly what its consume would have left: its first bytes topped up from bytes.
 */
export function bypassSentry(sentry: Zmodem.Sentry, bytes: Uint8Array): boolean {
  const cache = sentry._cache;
  if (sentry._zsession || sentry._parsed_session || bytes.indexOf(ZDLE) >= 0 || cache.indexOf(ZDLE) >= 0) {
    return false;
  }
  for (let i = 0; cache.length < SENTRY_KEEPS && i < bytes.length; i++) {
    cache.push(bytes[i]!);
  }
  return true;
}
