// Reading an entry's records through a query: `POST …/q`, then batched reads until the
// last one (`x-reduct-last`), each record's metadata from its `x-reduct-time-<ts>`
// header and, when asked, its payload cut from the batch's body by the lengths.

import { call } from './api.js';
import { recordHeader } from './format.js';

/**
 * The records of entry path `base` (`b/<bucket>/<entry>`) that `query` (a ReductStore
 * query: start, stop, limit, when…) selects, oldest first: `{ts, size, contentType,
 * labels}` and, with `payloads`, `body` (a Uint8Array).
 */
export async function readRecords(base, query, { payloads = false } = {}) {
  const asked = { query_type: 'QUERY', ...query, only_metadata: !payloads };
  const { id } = await call(`${base}/q`, { method: 'POST', body: asked });
  const records = [];
  for (;;) {
    const response = await call(`${base}/batch?q=${id}`, { method: payloads ? 'GET' : 'HEAD', raw: true });
    if (response.status === 204) break;
    const batch = [];
    for (const [name, value] of response.headers) {
      if (name.startsWith('x-reduct-time-')) batch.push({ ts: name.slice('x-reduct-time-'.length), ...recordHeader(value) });
    }
    batch.sort((a, b) => (BigInt(a.ts) < BigInt(b.ts) ? -1 : 1));
    if (payloads) {
      const body = new Uint8Array(await response.arrayBuffer());
      let at = 0;
      for (const record of batch) {
        record.body = body.subarray(at, at + record.size);
        at += record.size;
      }
    }
    records.push(...batch);
    if (response.headers.get('x-reduct-last') === 'true') break;
    if (query.limit && records.length >= query.limit) break;
  }
  return query.limit ? records.slice(0, query.limit) : records;
}

/** A record's payload read as JSON (`{}` when it is not). */
export function json(record) {
  try {
    return JSON.parse(new TextDecoder().decode(record.body));
  } catch {
    return {};
  }
}
