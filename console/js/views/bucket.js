// A bucket: its size and entries (parents listed as a tree of names), its settings
// (quota, block limits) saved in place, its rename, and its removal after confirmation.

import { call, readable, segment } from '../api.js';
import { json, readRecords } from '../batch.js';
import { errorBox, fill, h } from '../dom.js';
import { stacked, stackedColumns, thin, tierClass } from '../chart.js';
import { bytes, count, millis, timestamp } from '../format.js';
import { link } from '../route.js';

/** Entries listed at once. */
const ENTRIES_PAGE = 100;
/** Points of the bytes-by-tier history at most. */
const HISTORY_POINTS = 120;
/** Usage events read for it at most. */
const HISTORY_EVENTS = 2000;
/** How far back it goes (µs): a day. */
const HISTORY_SPAN_US = 86400e6;

/**
 * The bucket's bytes by tier over time, from the usage events the server writes every
 * minute to `$system` (`usage/<instance>/<bucket>`, with their `tiers`).
 */
async function history(name) {
  const system = await readable('$system') ? await call(`b/${segment('$system')}`) : null;
  const entry = system && (system.entries || [])
    .map((e) => e.name)
    .find((e) => e.startsWith('usage/') && e.split('/').length === 3 && e.endsWith(`/${name}`));
  if (!entry) return h('p', { class: 'muted' }, 'No usage recorded yet (the server writes it every minute).');
  const base = `b/${segment('$system')}/${segment(entry)}`;
  // The last day: one event a minute, within the events read at most.
  const start = Date.now() * 1000 - HISTORY_SPAN_US;
  const events = (await readRecords(base, { start, limit: HISTORY_EVENTS }, { payloads: true })).map(json);
  const series = thin(events.filter((e) => Array.isArray(e.tiers)).map((e) => ({
    x: e.timestamp,
    parts: Object.fromEntries(e.tiers.map((t) => [t.tier, t.bytes])),
  })), HISTORY_POINTS);
  if (series.length === 0) return h('p', { class: 'muted' }, 'No usage with tiers recorded yet.');
  return h('figure', { class: 'chart history' },
    stackedColumns(series, (item) => timestamp(item.x), { format: bytes, times: series.map((item) => millis(item.x)) }),
    h('figcaption', { class: 'muted' }, `${series.length} snapshots from ${timestamp(series[0].x)} to ${timestamp(series[series.length - 1].x)}`));
}

const SETTINGS = [
  ['quota_type', 'Quota type', ['NONE', 'FIFO', 'HARD']],
  ['quota_size', 'Quota size (bytes)'],
  ['max_block_size', 'Max block size (bytes)'],
  ['max_block_records', 'Max block records'],
];

export async function show({ view, route, go }) {
  const name = route.bucket;
  const [bucket, storage] = await Promise.all([
    call(`b/${segment(name)}`),
    call(`b/${segment(name)}/storage`).catch(() => null),
  ]);
  const tiers = storage ? storage.totals.tiers : [];
  const byTier = tiers.length === 0 ? h('p', { class: 'muted' }, 'Nothing stored yet.') : h('figure', { class: 'chart' },
    stacked(tiers.map((t) => ({ label: t.tier, value: t.bytes })), { format: bytes }),
    h('figcaption', { class: 'legend' }, tiers.map((t) => h('span', {},
      h('span', { class: `swatch ${tierClass(t.tier)}` }),
      `${t.tier}: ${bytes(t.bytes)}, ${count(t.records)} records, ${count(t.blocks)} blocks`))));
  const problem = h('div');
  const fields = SETTINGS.map(([key, label, options]) => {
    const value = bucket.settings[key] ?? '';
    const input = options
      ? h('select', { id: `s-${key}`, name: key }, options.map((o) => h('option', { value: o, selected: o === value }, o)))
      : h('input', { id: `s-${key}`, name: key, type: 'number', min: 0, value });
    return [key, h('label', { for: `s-${key}` }, label, input), input, Boolean(options)];
  });
  const settings = h('form', {
    class: 'inline',
    onsubmit: async (event) => {
      event.preventDefault();
      const body = {};
      for (const [key, , input, isText] of fields) body[key] = isText ? input.value : Number(input.value);
      try {
        await call(`b/${segment(name)}`, { method: 'PUT', body });
        go(link(name));
      } catch (error) {
        fill(problem, errorBox(error));
      }
    },
  }, fields.map(([, label]) => label), h('button', { type: 'submit' }, 'Save settings'));
  const remove = h('button', {
    class: 'danger',
    type: 'button',
    onclick: async () => {
      // eslint-disable-next-line no-alert
      if (window.prompt(`Remove bucket '${name}' and all its data? Type its name to confirm.`) !== name) return;
      try {
        await call(`b/${segment(name)}`, { method: 'DELETE' });
        go('./');
      } catch (error) {
        fill(problem, errorBox(error));
      }
    },
  }, 'Remove bucket');
  const newName = h('input', { id: 'rename-to', required: true, pattern: '[A-Za-z0-9_\\-]+', value: name });
  const rename = h('form', {
    id: 'rename-bucket',
    class: 'inline',
    onsubmit: async (event) => {
      event.preventDefault();
      const to = newName.value.trim();
      if (to === name) return;
      try {
        await call(`b/${segment(name)}/rename`, { method: 'PUT', body: { new_name: to } });
        go(link(to));
      } catch (error) {
        fill(problem, errorBox(error));
      }
    },
  }, h('label', { for: 'rename-to' }, 'New name', newName), h('button', { class: 'secondary', type: 'submit' }, 'Rename bucket'));
  const entries = [...(bucket.entries || [])].sort((a, b) => a.name.localeCompare(b.name));
  const row = (e) => {
    const depth = e.name.split('/').length - 1;
    return h('tr', {},
      h('td', {}, h('span', { class: 'muted' }, '· '.repeat(depth)), h('a', { href: link(name, e.name), 'data-link': true }, e.name)),
      h('td', { class: 'num' }, count(e.record_count)),
      h('td', { class: 'num' }, count(e.block_count)),
      h('td', { class: 'num' }, bytes(e.size)),
      h('td', {}, timestamp(e.oldest_record)),
      h('td', {}, timestamp(e.latest_record)));
  };
  // A bucket may hold thousands of entries: a page of them at a time, filtered by name.
  const list = h('div');
  const filter = h('input', { id: 'entry-filter', type: 'search', placeholder: 'name contains…' });
  let first = 0;
  const show = () => {
    const wanted = filter.value.trim().toLowerCase();
    const matching = wanted ? entries.filter((e) => e.name.toLowerCase().includes(wanted)) : entries;
    first = Math.min(first, Math.max(0, matching.length - 1));
    const page = matching.slice(first, first + ENTRIES_PAGE);
    fill(list,
      page.length === 0
        ? h('p', { class: 'muted' }, entries.length === 0 ? 'No entry yet: write a record, or upload one from an entry page.' : 'No entry matches.')
        : h('table', { 'aria-label': 'Entries' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Entry'), h('th', { class: 'num' }, 'Records'), h('th', { class: 'num' }, 'Blocks'), h('th', { class: 'num' }, 'Size'), h('th', {}, 'Oldest'), h('th', {}, 'Latest'))),
          h('tbody', {}, page.map(row))),
      matching.length > ENTRIES_PAGE && h('div', { class: 'pager' },
        h('button', { class: 'secondary', type: 'button', disabled: first === 0, onclick: () => { first = Math.max(0, first - ENTRIES_PAGE); show(); } }, 'Previous'),
        h('button', { class: 'secondary', type: 'button', disabled: first + ENTRIES_PAGE >= matching.length, onclick: () => { first += ENTRIES_PAGE; show(); } }, 'Next'),
        h('span', { class: 'muted' }, `${count(first + 1)}–${count(Math.min(first + ENTRIES_PAGE, matching.length))} of ${count(matching.length)}`)));
  };
  filter.addEventListener('input', () => { first = 0; show(); });
  show();
  fill(view,
    h('p', {}, h('a', { href: './', 'data-link': true }, 'Dashboard'), ' / ', name),
    h('h1', {}, `Bucket ${name}`),
    h('div', { class: 'cards' },
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Size'), h('div', { class: 'value' }, bytes(bucket.info.size))),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Entries'), h('div', { class: 'value' }, count(bucket.info.entry_count)))),
    h('h2', {}, 'Bytes by tier'),
    byTier,
    h('h2', {}, 'Bytes by tier over time'),
    await history(name).catch((e) => errorBox(e)),
    h('h2', {}, 'Entries'),
    entries.length > ENTRIES_PAGE && h('label', { for: 'entry-filter' }, 'Filter', filter),
    list,
    h('h2', {}, 'Settings'),
    settings,
    problem,
    h('h2', {}, 'Rename'),
    rename,
    h('h2', {}, 'Danger zone'),
    remove);
}
