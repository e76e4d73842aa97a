// An entry: a data-volume chart of the chosen range (records and bytes over time, counted
// by the server in a bounded number of points), its records page by page (a metadata query per page, never
// the whole entry), a `when` condition applied to the list (the server's message shown
// when it is refused), a record's preview (images inline, JSON and text pretty-printed,
// anything else as hex with a download link), its labels edited in place, its removal,
// a file uploaded as a new record, and its attachments (`attachments.js`).

import { call, segment } from '../api.js';
import { readRecords } from '../batch.js';
import { panel as attachments } from './attachments.js';
import { bars, histogram, roundStretches } from '../chart.js';
import { errorBox, fill, h } from '../dom.js';
import {
  bytes, count, DOWNLOAD_TYPE, downloadName, fromInputTime, hexDump, inputTime, millis,
  previewKind, span, timestamp,
} from '../format.js';
import { link } from '../route.js';

const PAGE = 20;
/** Points of the data-volume chart. */
const CHART_BARS = 60;
/** Records whose metadata the chart reads at most when a condition filters them. */
const FILTERED_RECORDS = 5000;

/** The metadata of up to `limit` records of the entry from `start` (with `when`). */
function metadata(base, { start, stop, limit, when }) {
  const query = { limit };
  if (start !== undefined) query.start = Number(start);
  if (stop !== undefined) query.stop = Number(stop);
  if (when) query.when = when;
  return readRecords(base, query);
}

/**
 * The entry's records and bytes per stretch of the range: counted by the server from its
 * index (`/storage/{bucket}/histogram`, exact at any size of entry), or, when a condition
 * filters them, from the metadata of the first records it selects.
 */
async function volume(bucket, entry, base, { start, stop, when }) {
  if (when) {
    const records = await metadata(base, { start, stop, limit: FILTERED_RECORDS, when });
    if (records.length === 0) return null;
    const { first, step, count: stretches } = roundStretches(
      records[0].ts, Number(records[records.length - 1].ts) + 1, CHART_BARS);
    const end = first + step * stretches;
    return {
      first,
      step,
      bytes: histogram(records.map((r) => [Number(r.ts), r.size]), first, end, stretches),
      records: histogram(records.map((r) => [Number(r.ts), 1]), first, end, stretches),
      note: records.length >= FILTERED_RECORDS ? ` (the first ${count(FILTERED_RECORDS)} records the condition selects)` : ' (the records the condition selects)',
    };
  }
  const query = new URLSearchParams({ entry, points: String(CHART_BARS) });
  if (start) query.set('start', start);
  if (stop) query.set('stop', stop);
  const counted = await call(`storage/${segment(bucket)}/histogram?${query}`);
  if (counted.records.every((n) => n === 0)) return null;
  return { first: counted.start, step: counted.step, bytes: counted.bytes, records: counted.records, note: "" };
}

function chart(data) {
  if (!data) return h('p', { class: 'muted' }, 'No records in this range.');
  const at = (i) => timestamp(Math.floor(data.first + i * data.step));
  const label = (i) => `${at(i)}: ${count(data.records[i])} records, ${bytes(data.bytes[i])}`;
  const total = data.records.reduce((a, b) => a + b, 0);
  return h('figure', { class: 'chart' },
    bars(data.bytes, label, { width: 1000, format: bytes, times: data.bytes.map((_, i) => millis(Math.floor(data.first + (i + 0.5) * data.step))) }),
    h('figcaption', { class: 'muted' },
      `${count(total)} record${total === 1 ? '' : 's'}, bytes per ${span(data.step)} from ${at(0)} to ${at(data.bytes.length)}`,
      data.note));
}

async function preview(base, entry, record, refresh) {
  const response = await call(`${base}?ts=${record.ts}`, { raw: true });
  const blob = await response.blob();
  const type = response.headers.get('content-type') || '';
  const labels = {};
  for (const [name, value] of response.headers) {
    if (name.startsWith('x-reduct-label-')) labels[name.slice('x-reduct-label-'.length)] = value;
  }
  // Two URLs: the download's, typed so that no browser renders it (the record's own
  // type could make it a page of this origin), and a raster image's for its preview.
  const download = URL.createObjectURL(new Blob([blob], { type: DOWNLOAD_TYPE }));
  let body;
  switch (previewKind(type)) {
    case 'image': {
      const picture = URL.createObjectURL(new Blob([blob], { type: type.split(';')[0].trim() }));
      body = h('img', { src: picture, alt: `record ${record.ts}` });
      break;
    }
    case 'json': {
      const text = await blob.text();
      let shown = text;
      try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch { /* shown as it is */ }
      body = h('pre', {}, shown);
      break;
    }
    case 'text': body = h('pre', {}, await blob.text()); break;
    default: body = h('pre', {}, hexDump(new Uint8Array(await blob.arrayBuffer())));
  }
  const problem = h('div');
  const rows = Object.entries(labels).map(([k, v]) => [k, h('input', { 'aria-label': `label ${k}`, value: v })]);
  const newKey = h('input', { 'aria-label': 'new label name', placeholder: 'name' });
  const newValue = h('input', { 'aria-label': 'new label value', placeholder: 'value' });
  const save = async (event) => {
    event.preventDefault();
    const headers = {};
    for (const [k, input] of rows) headers[`x-reduct-label-${k}`] = input.value;
    if (newKey.value.trim()) headers[`x-reduct-label-${newKey.value.trim()}`] = newValue.value;
    try {
      await call(`${base}?ts=${record.ts}`, { method: 'PATCH', headers });
      await refresh(record);
    } catch (error) {
      fill(problem, errorBox(error));
    }
  };
  const remove = async () => {
    // eslint-disable-next-line no-alert
    if (!window.confirm(`Remove record ${record.ts}?`)) return;
    try {
      await call(`${base}?ts=${record.ts}`, { method: 'DELETE' });
      await refresh(null);
    } catch (error) {
      fill(problem, errorBox(error));
    }
  };
  return h('section', { class: 'preview', 'aria-label': 'Record' },
    h('h2', {}, `Record ${timestamp(record.ts)}`),
    h('p', { class: 'muted' }, `${type}, ${bytes(blob.size)} `, h('a', { href: download, download: downloadName(entry, record.ts, type) }, 'Download')),
    body,
    h('form', { id: 'labels-form', class: 'inline', onsubmit: save },
      rows.map(([k, input]) => h('label', {}, k, input)),
      h('label', {}, 'Add label', newKey), h('label', {}, 'Value', newValue),
      h('button', { type: 'submit' }, 'Save labels')),
    h('button', { id: 'remove-record', class: 'danger', type: 'button', onclick: remove }, 'Remove record'),
    problem);
}

export async function show({ view, route, go }) {
  const { bucket, entry, params } = route;
  const base = `b/${segment(bucket)}/${segment(entry)}`;
  const starts = [params.start];
  let when = params.when ? JSON.parse(params.when) : undefined;
  const listing = h('div');
  const detail = h('div', { class: 'preview' }, h('p', { class: 'muted' }, 'Choose a record to see it.'));
  const volumeBox = h('div');
  const problem = h('div');

  const showRecord = async (record) => {
    try {
      fill(detail, record ? await preview(base, entry, record, async (r) => { await page(); await showRecord(r); }) : h('p', { class: 'muted' }, 'Removed.'));
    } catch (error) {
      fill(detail, errorBox(error));
    }
  };

  async function page() {
    const start = starts[starts.length - 1];
    try {
      const records = await metadata(base, { start, stop: params.stop, limit: PAGE + 1, when });
      fill(problem);
      const more = records.length > PAGE;
      const shown = records.slice(0, PAGE);
      const rows = shown.map((r) => h('tr', {},
        h('td', {}, h('button', { class: 'secondary', type: 'button', onclick: () => showRecord(r) }, timestamp(r.ts))),
        h('td', { class: 'num' }, bytes(r.size)),
        h('td', {}, r.contentType),
        h('td', {}, h('span', { class: 'labels' }, Object.entries(r.labels).map(([k, v]) => h('span', { class: 'tag' }, `${k}=${v}`))))));
      const pager = h('div', { class: 'pager' },
        h('button', { class: 'secondary', type: 'button', disabled: starts.length === 1, onclick: () => { starts.pop(); page(); } }, 'Previous'),
        h('button', {
          class: 'secondary', type: 'button', disabled: !more,
          onclick: () => { starts.push(String(BigInt(records[PAGE].ts))); page(); },
        }, 'Next'),
        h('span', { class: 'muted' }, `page ${starts.length}`));
      fill(listing, shown.length === 0 ? h('p', { class: 'muted' }, 'No records.') : h('table', { 'aria-label': 'Records' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Time'), h('th', { class: 'num' }, 'Size'), h('th', {}, 'Type'), h('th', {}, 'Labels'))),
        h('tbody', {}, rows)), pager);
    } catch (error) {
      fill(problem, errorBox(error));
    }
  }

  async function drawChart() {
    try {
      fill(volumeBox, chart(await volume(bucket, entry, base, { start: params.start, stop: params.stop, when })));
    } catch (error) {
      fill(volumeBox, errorBox(error));
    }
  }

  const from = h('input', { id: 'range-start', type: 'datetime-local', step: 1, value: inputTime(params.start) });
  const to = h('input', { id: 'range-stop', type: 'datetime-local', step: 1, value: inputTime(params.stop) });
  const range = h('form', {
    id: 'range-form',
    class: 'inline',
    onsubmit: (event) => {
      event.preventDefault();
      go(link(bucket, entry, { ...params, start: fromInputTime(from.value), stop: fromInputTime(to.value) }));
    },
  }, h('label', { for: 'range-start' }, 'From (UTC)', from), h('label', { for: 'range-stop' }, 'To (UTC)', to),
  h('button', { type: 'submit' }, 'Show range'),
  h('button', { class: 'secondary', type: 'button', onclick: () => go(link(bucket, entry, { ...params, start: '', stop: '' })) }, 'Whole entry'));

  const condition = h('textarea', { id: 'when', rows: 3, cols: 50, spellcheck: 'false' }, params.when || '');
  const query = h('form', {
    id: 'query-form',
    class: 'inline',
    onsubmit: async (event) => {
      event.preventDefault();
      const text = condition.value.trim();
      try {
        when = text ? JSON.parse(text) : undefined;
      } catch (error) {
        fill(problem, errorBox(`The condition is not JSON: ${error.message}`));
        return;
      }
      history.replaceState(null, '', new URL(link(bucket, entry, { ...params, when: text }), document.baseURI));
      starts.splice(1);
      await Promise.all([page(), drawChart()]);
    },
  }, h('label', { for: 'when' }, 'Condition (when)', condition), h('button', { type: 'submit' }, 'Run query'));

  const file = h('input', { id: 'upload', type: 'file' });
  const upload = h('form', {
    id: 'upload-form',
    class: 'inline',
    onsubmit: async (event) => {
      event.preventDefault();
      const chosen = file.files[0];
      if (!chosen) return;
      try {
        const ts = BigInt(Date.now()) * 1000n;
        await call(`${base}?ts=${ts}`, {
          method: 'POST', body: chosen, headers: { 'content-type': chosen.type || 'application/octet-stream' },
        });
        go(link(bucket, entry, params));
      } catch (error) {
        fill(problem, errorBox(error));
      }
    },
  }, h('label', { for: 'upload' }, 'Upload a file as a record', file), h('button', { type: 'submit' }, 'Upload'));

  fill(view,
    h('p', {}, h('a', { href: './', 'data-link': true }, 'Dashboard'), ' / ', h('a', { href: link(bucket), 'data-link': true }, bucket), ' / ', entry),
    h('h1', {}, `Entry ${entry}`),
    h('h2', {}, 'Data volume'), range, volumeBox,
    h('h2', {}, 'Records'), query, problem,
    h('div', { class: 'split' }, listing, detail),
    h('h2', {}, 'Attachments'), attachments(bucket, entry),
    h('h2', {}, 'Upload'), upload);
  await Promise.all([page(), drawChart()]);
}
