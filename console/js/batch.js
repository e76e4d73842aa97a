// Reading records through a query: an entry's (`POST …/q`, then batched reads until the
// last one, `x-reduct-last`, each record's metadata from its `x-reduct-time-<ts>`
// header) or several entries' of a bucket (`POST /io/{bucket}/q`, then `/io/{bucket}/read`,
// whose headers `protocol.js` decodes); when asked, each payload is cut from the batch's
// body by the lengths.

import { call, segment } from './api.js';
import { recordHeader } from './format.js';
import { decodeReadBatch } from './protocol.js';

function cutPayloads(records, body) {
  let at = 0;
  for (const record of records) {
    record.body = body.subarray(at, at + record.size);
    at += record.size;
  }
}

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
    if (payloads) cutPayloads(batch, new Uint8Array(await response.arrayBuffer()));
    records.push(...batch);
    if (response.headers.get('x-reduct-last') === 'true') break;
    if (query.limit && records.length >= query.limit) break;
  }
  return query.limit ? records.slice(0, query.limit) : records;
}

/**
 * The records of the entries named `entries` of `bucket` that `query` selects, entry by
 * entry, oldest first: `{entry, ts, size, contentType, labels}` and, with `payloads`,
 * `body`. An entry that does not exist selects nothing (where an entry's own query
 * answers 404).
 */
export async function readBucketRecords(bucket, entries, query, { payloads = false } = {}) {
  const base = `io/${segment(bucket)}`;
  const asked = { query_type: 'QUERY', ...query, entries, only_metadata: !payloads };
  const { id } = await call(`${base}/q`, { method: 'POST', body: asked });
  const records = [];
  for (;;) {
    const response = await call(`${base}/read`, {
      method: payloads ? 'GET' : 'HEAD', raw: true, headers: { 'x-reduct-query-id': String(id) },
    });
    if (response.status === 204) break;
    const batch = decodeReadBatch([...response.headers]);
    if (payloads) cutPayloads(batch, new Uint8Array(await response.arrayBuffer()));
    records.push(...batch);
    if (response.headers.get('x-reduct-last') === 'true') break;
  }
  return records;
}

/** A record's payload read as JSON (`{}` when it is not). */
export function json(record) {
  try {
    return JSON.parse(new TextDecoder().decode(record.body));
  } catch {
    return {};
  }
}
