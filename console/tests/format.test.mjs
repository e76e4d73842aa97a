// Unit tests of the console's pure modules, with Node's built-in test runner:
// `node --test console/tests/` (run by `cargo test --test console` where Node is present).
import assert from 'node:assert/strict';
import test from 'node:test';

import {
  bytes, count, dateAndTime, DOWNLOAD_TYPE, downloadName, duration, fromInputTime, hexDump, inputTime, isoTime, millis,
  policyState, previewKind, recordHeader, span, timestamp,
} from '../js/format.js';
import {
  histogram, linear, placeInstant, roundStretches, thin, tierClass, ticks, timeTicks,
} from '../js/chart.js';
import { link, parse, section } from '../js/route.js';
import { decodeReadBatch, systemSegment } from '../js/protocol.js';

test('sizes, counts and durations read as people write them', () => {
  assert.equal(bytes(0), '0 B');
  assert.equal(bytes(999), '999 B');
  assert.equal(bytes(1234567), '1.2 MB');
  assert.equal(bytes(250e9), '250 GB');
  assert.equal(count(1234567), '1,234,567');
  assert.equal(duration(93784), '1d 2h 3m');
  assert.equal(duration(42), '42s');
});

test('timestamps keep their microseconds', () => {
  assert.equal(timestamp('1700000000123456'), '2023-11-14 22:13:20.123456');
  assert.equal(timestamp(undefined), '—');
  assert.equal(timestamp('18446744073709551615'), '—');
  assert.equal(isoTime('2026-12-04T08:38:21.405Z'), '2026-12-04 08:38:21 UTC');
  assert.equal(isoTime(null), '—');
});

test('record headers of batched reads split at unquoted commas', () => {
  assert.deepEqual(recordHeader('10,text/plain,Lab=b,c="d,f"'), {
    size: 10, contentType: 'text/plain', labels: { Lab: 'b', c: 'd,f' },
  });
  assert.deepEqual(recordHeader('18,text/csv'), { size: 18, contentType: 'text/csv', labels: {} });
});

test('previews follow the content type', () => {
  assert.equal(previewKind('image/png'), 'image');
  assert.equal(previewKind('application/json; charset=utf-8'), 'json');
  assert.equal(previewKind('text/plain'), 'text');
  assert.equal(previewKind('application/octet-stream'), 'binary');
  // SVG can carry script: shown as its source, never drawn from a blob of this origin.
  assert.equal(previewKind('image/svg+xml'), 'text');
  assert.equal(previewKind('text/html'), 'text');
  assert.equal(downloadName('cam/front', 17, 'image/jpeg'), 'front-17.jpg');
  assert.equal(downloadName('a/../..', 5, 'text/html; charset=utf-8'), '_-5.html');
  assert.equal(downloadName('x y', 1, 'application/x-thing'), 'x_y-1.bin');
  assert.equal(DOWNLOAD_TYPE, 'application/octet-stream');
  const dump = hexDump(new Uint8Array([0x48, 0x69, 0, 255]));
  assert.equal(dump, `00000000  ${'48 69 00 ff'.padEnd(47)}  Hi..`);
});

test('chart scales map domains and choose round ticks', () => {
  const y = linear([0, 100], [200, 0]);
  assert.equal(y(0), 200);
  assert.equal(y(50), 100);
  assert.equal(linear([5, 5], [1, 9])(5), 1);
  assert.deepEqual(ticks(0, 100, 4), [0, 50, 100]);
  const series = Array.from({ length: 10 }, (_, i) => ({ x: i }));
  assert.deepEqual(thin(series, 4).map((p) => p.x), [0, 2, 5, 9]);
  assert.equal(thin(series, 20).length, 10);
  assert.equal(tierClass('remote cold'), 'tier-remote');
  assert.equal(tierClass('zstd-3'), 'tier-zstd');
  assert.equal(tierClass('open'), 'tier-raw');
  assert.deepEqual(histogram([[0, 1], [5, 2], [9, 3], [10, 9]], 0, 10, 2), [1, 5]);
});

test('routes round-trip through links', () => {
  assert.deepEqual(parse(''), { view: 'dashboard', params: {} });
  assert.deepEqual(parse('b/frames'), { view: 'bucket', bucket: 'frames', params: {} });
  const entry = parse('b/frames/cam/left', '?start=5');
  assert.deepEqual(entry, { view: 'entry', bucket: 'frames', entry: 'cam/left', params: { start: '5' } });
  assert.equal(link('frames', 'cam/left', { start: 5, when: '' }), 'b/frames/cam/left?start=5');
  assert.equal(link('a b'), 'b/a%20b');
  assert.equal(parse('nope/x').view, 'notFound');
  assert.deepEqual(parse('replications/r1'), { view: 'replication', name: 'r1', params: {} });
});

test('a multi-entry read batch decodes to records, deltas applied per entry', () => {
  // As a browser's Headers gives them: sorted by name, not in body order.
  const headers = [
    ['content-type', 'application/octet-stream'],
    ['x-reduct-0-10', '3,,1=b'],
    ['x-reduct-0-2', '5,text/plain,0="x,y",1=a'],
    ['x-reduct-0-30', '4,,0='],
    ['x-reduct-1-0', '7,application/json'],
    ['x-reduct-entries', 'cam%2F%24meta,other'],
    ['x-reduct-labels', 'key,n'],
    ['x-reduct-last', 'true'],
    ['x-reduct-start-ts', '1700000000000000'],
  ];
  assert.deepEqual(decodeReadBatch(headers), [
    { entry: 'cam/$meta', ts: '1700000000000002', size: 5, contentType: 'text/plain', labels: { key: 'x,y', n: 'a' } },
    { entry: 'cam/$meta', ts: '1700000000000010', size: 3, contentType: 'text/plain', labels: { key: 'x,y', n: 'b' } },
    { entry: 'cam/$meta', ts: '1700000000000030', size: 4, contentType: 'text/plain', labels: { n: 'b' } },
    { entry: 'other', ts: '1700000000000000', size: 7, contentType: 'application/json', labels: {} },
  ]);
  assert.deepEqual(decodeReadBatch([['x-reduct-entries', 'a'], ['x-reduct-start-ts', '5']]), []);
});

test('names become $system entry segments as the server writes them', () => {
  assert.equal(systemSegment('edge 1'), 'edge_1');
  assert.equal(systemSegment('cam-2_x'), 'cam-2_x');
  assert.equal(systemSegment('é/x'), '__x');
  assert.equal(systemSegment(''), 'unknown');
});

test('a range typed in UTC round-trips through microseconds', () => {
  assert.equal(inputTime('1700000000123456'), '2023-11-14T22:13:20');
  assert.equal(fromInputTime('2023-11-14T22:13:20'), '1700000000000000');
  assert.equal(fromInputTime('2023-11-14T22:13'), '1699999980000000');
  assert.equal(fromInputTime('not a time'), '');
  assert.equal(inputTime(undefined), '');
});

test('a time axis ticks at round instants and labels what its step needs', () => {
  const at = (iso) => Date.parse(iso);
  // Two hours: every 30 minutes, on the half hour, times only.
  assert.deepEqual(
    timeTicks(at('2026-12-07T10:07:00Z'), at('2026-12-07T12:07:00Z')).map((t) => t.label),
    ['10:30', '11:00', '11:30', '12:00'],
  );
  // Across midnight: the date joins the time.
  const night = timeTicks(at('2026-12-06T22:00:00Z'), at('2026-12-07T02:00:00Z'), 4);
  assert.ok(night.some((t) => t.label === '12-07 00:00'), JSON.stringify(night));
  assert.ok(night.every((t) => t.ms % 3600000 === 0), 'on the hour');
  // Seconds: to the second.
  assert.deepEqual(
    timeTicks(at('2023-11-14T22:13:20.500Z'), at('2023-11-14T22:13:23.100Z'), 3).map((t) => t.label),
    ['22:13:21', '22:13:22', '22:13:23'],
  );
  // Weeks of data: dates at midnight.
  const weeks = timeTicks(at('2026-11-01T05:00:00Z'), at('2026-12-01T05:00:00Z'));
  assert.ok(weeks.length >= 3 && weeks.length <= 5, JSON.stringify(weeks));
  assert.ok(weeks.every((t) => /^\d{4}-\d{2}-\d{2}$/.test(t.label) && t.ms % 86400000 === 0));
  // Under a second: milliseconds.
  assert.deepEqual(
    timeTicks(at('2026-12-07T10:00:05.120Z'), at('2026-12-07T10:00:05.480Z'), 3).map((t) => t.label),
    ['10:00:05.200', '10:00:05.400'],
  );
  // One instant: itself.
  assert.deepEqual(timeTicks(at('2026-12-07T10:00:05Z'), at('2026-12-07T10:00:05Z')).map((t) => t.label), ['10:00:05']);
  assert.deepEqual(timeTicks(NaN, NaN), []);
});

test('an instant is placed between the columns around it', () => {
  assert.equal(placeInstant(15, [10, 20, 40], [100, 200, 300]), 150);
  assert.equal(placeInstant(30, [10, 20, 40], [100, 200, 300]), 250);
  assert.equal(placeInstant(5, [10, 20], [100, 200]), null);
  assert.equal(placeInstant(10, [10], [100]), 100);
});

test('cards show an instant to the second; charts take it in ms', () => {
  assert.deepEqual(dateAndTime('1700000000123456'), ['2023-11-14', '22:13:20']);
  assert.equal(dateAndTime(undefined), null);
  assert.equal(millis('1700000000123456'), 1700000000123);
  assert.equal(span(250000), '250 ms');
  assert.equal(span(5400e6), '1h 30m');
});

test('each page lights its own link in the navigation', () => {
  assert.equal(section(parse('')), './');
  assert.equal(section(parse('b/cams/front')), './');
  assert.equal(section(parse('b/%24system')), 'b/%24system');
  assert.equal(section(parse('lifecycles/keep-week')), 'lifecycles');
  assert.equal(section(parse('replications')), 'replications');
  assert.equal(section(parse('tokens')), 'tokens');
  assert.equal(section(parse('login')), null);
});

test('a policy says catching up only beside records still waiting', () => {
  assert.equal(policyState({ caught_up: true, backlog_records: 0 }), 'caught up');
  assert.equal(policyState({ caught_up: false, backlog_records: 1234 }), 'catching up (1,234 records)');
  assert.equal(policyState({ caught_up: false, backlog_records: 0 }), 'nothing waiting');
  assert.equal(policyState({ caught_up: null, total_runs: 0 }), 'not run yet');
  assert.equal(policyState({ caught_up: null, last_status: 'error', total_runs: 2 }), 'last run failed');
  assert.equal(policyState({ caught_up: true, running_now: true }), 'running');
});

test('a chart cuts its range into round stretches, as the server does', () => {
  const DAY = 86400e6;
  // The odd span: 353 days in 60 bars was "5d 21h 6m" a bar; a week now, from a Monday.
  const start = 1765000000e6;
  const weeks = roundStretches(start, start + 353 * DAY, 60);
  assert.equal(weeks.step, 7 * DAY);
  assert.equal(new Date(weeks.first / 1000).toISOString().slice(0, 10), '2025-12-01');
  assert.equal(new Date(weeks.first / 1000).getUTCDay(), 1);
  assert.ok(weeks.first <= start && weeks.first + weeks.count * weeks.step >= start + 353 * DAY);
  assert.ok(weeks.count <= 60);
  const hours = roundStretches(start, start + 2 * DAY, 60);
  assert.equal(hours.step, 3600e6);
  assert.equal(hours.first % 3600e6, 0);
  assert.deepEqual(roundStretches(100, 200, 3), { first: 100, step: 50, count: 2 });
  assert.equal(span(50), '50 µs');
});
