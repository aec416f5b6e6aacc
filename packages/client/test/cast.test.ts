// The asciicast v2 parser (recordings): what it reads, and every broken file refused by line.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CastError, MAX_CAST_LINE, parseCast } from '../src/index';

const hdr = '{"version":2,"width":80,"height":24,"muxterm":{"session":"s","owner":"o"}}\n';

describe('parseCast', () => {
  it('reads the header and the events, UTF-8 included, skipping blank lines', () => {
    const c = parseCast(new TextEncoder().encode(hdr + '[0.1, "o", "héllo 世界\\r\\n"]\n\n[0.2, "r", "100x30"]\n[0.3, "m", "attach"]\n'));
    assert.equal(c.header.width, 80);
    assert.equal(c.header.muxterm?.session, 's');
    assert.deepEqual(c.events, [
      { at: 0.1, code: 'o', data: 'héllo 世界\r\n' },
      { at: 0.2, code: 'r', data: '100x30' },
      { at: 0.3, code: 'm', data: 'attach' },
    ]);
  });

  const broken: Record<string, [string, number]> = {
    empty: ['', 1],
    'not json': ['hello\n', 1],
    'version 1': ['{"version":1,"width":80,"height":24}\n', 1],
    'no size': ['{"version":2}\n', 1],
    'huge size': ['{"version":2,"width":99999999,"height":24}\n', 1],
    'truncated event': [hdr + '[0.5, "o", "abc', 2],
    'time goes back': [hdr + '[1, "o", "a"]\n[0.5, "o", "b"]\n', 3],
    'negative time': [hdr + '[-1, "o", "a"]\n', 2],
    'two members': [hdr + '[1, "o"]\n', 2],
    'data a number': [hdr + '[1, "o", 7]\n', 2],
    'an object': [hdr + '{"oops": true}\n', 2],
    'line too long': [hdr + '[1, "o", "' + 'x'.repeat(MAX_CAST_LINE) + '"]\n', 2],
  };
  for (const [name, [text, line]] of Object.entries(broken)) {
    it(`refuses ${name}, naming line ${line}`, () => {
      assert.throws(() => parseCast(text), (e: unknown) => e instanceof CastError && e.line === line && e.message.startsWith(`recording, line ${line}: `));
    });
  }
});
