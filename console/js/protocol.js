// The headers of a batched read of the multi-entry protocol (v2, `GET /io/{bucket}/read`)
// decoded to records: `x-reduct-entries` names the entries by index, `x-reduct-start-ts`
// is the base of every timestamp, `x-reduct-labels` names the labels by index, and each
// `x-reduct-<entry>-<delta>` holds `size[,content-type[,index=value…]]` where the content
// type and labels are changes to the same entry's record before (an empty content type:
// unchanged; an empty value: the label removed). Pure: no DOM, tested with Node.

import { recordHeader } from './format.js';

function names(value) {
  return (value || '').split(',').filter((n) => n !== '').map((n) => decodeURIComponent(n.trim()));
}

/**
 * The records `headers` (pairs of lower-case name and value) describe, in the order of
 * their payloads in the body (entry by entry, oldest first): `{entry, ts, size,
 * contentType, labels}`, `ts` a decimal string (microseconds exceed a double's range).
 */
export function decodeReadBatch(headers) {
  const map = new Map(headers);
  const entries = names(map.get('x-reduct-entries'));
  const labelNames = names(map.get('x-reduct-labels'));
  const start = BigInt(map.get('x-reduct-start-ts') || '0');
  const found = [];
  for (const [name, value] of headers) {
    const match = /^x-reduct-(\d+)-(\d+)$/.exec(name);
    if (match) found.push({ index: Number(match[1]), delta: BigInt(match[2]), value });
  }
  // Header order is not kept by every client (a browser's `Headers` sorts by name).
  found.sort((a, b) => (a.index - b.index) || (a.delta < b.delta ? -1 : a.delta > b.delta ? 1 : 0));
  const records = [];
  let previous = null;
  for (const { index, delta, value } of found) {
    if (previous && previous.index !== index) previous = null;
    const { size, contentType, labels: changes } = recordHeader(value);
    const labels = previous ? { ...previous.labels } : {};
    for (const [at, text] of Object.entries(changes)) {
      const label = labelNames[Number(at)] ?? at;
      if (text === '') delete labels[label];
      else labels[label] = text;
    }
    const record = {
      entry: entries[index] ?? String(index),
      ts: (start + delta).toString(),
      size,
      contentType: contentType || (previous ? previous.contentType : ''),
      labels,
    };
    records.push(record);
    previous = { index, labels, contentType: record.contentType };
  }
  return records;
}

/**
 * A name as the server writes it into `$system` entry names (`lifecycle/<instance>/<policy>`,
 * `replications/<instance>/<task>`): ASCII letters, digits, `-` and `_` kept, anything
 * else `_`, an empty name `unknown`.
 */
export function systemSegment(name) {
  const clean = Array.from(name || '', (c) => (/^[A-Za-z0-9_-]$/.test(c) ? c : '_')).join('');
  return clean === '' ? 'unknown' : clean;
}
