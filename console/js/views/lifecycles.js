// Lifecycle policies: listed with their state, created with every setting (including
// halflife's own `compression` and a tier policy's `remote`), run now with their progress
// followed; a policy's detail shows its settings, its last event, and the timeline of
// its runs from the `$system` events it wrote (each run a mark, coloured by its status;
// a click shows the event).

import { call, readable, segment } from '../api.js';
import { json, readBucketRecords } from '../batch.js';
import { errorBox, fill, h } from '../dom.js';
import {
  bytes, count, isoTime, millis, policyState, timestamp,
} from '../format.js';
import { bars, linear, timeAxis } from '../chart.js';
import { card, isoCard, timeCard } from './cards.js';
import { systemSegment } from '../protocol.js';

/** Runs shown on a timeline at most (the latest). */
const TIMELINE_RUNS = 200;

function field(id, label, input) {
  input.id = id;
  return h('label', { for: id }, label, input);
}

/** The policy form's inputs and the settings they make. */
function policyForm(onSubmit, settings = {}) {
  const name = h('input', { required: true, pattern: '[A-Za-z0-9_\\-]+', value: settings.name || '' });
  const type = h('select', {}, ['compress', 'delete', 'tier'].map((t) => h('option', { value: t, selected: t === settings.type }, t)));
  const bucket = h('input', { required: true, value: settings.bucket || '' });
  const entries = h('input', { placeholder: 'all', value: (settings.entries || []).join(', ') });
  const olderThan = h('input', { required: true, value: settings.older_than || '1d' });
  const interval = h('input', { required: true, value: settings.interval || '1h' });
  const algorithm = h('select', {}, ['', 'zstd', 'lz4'].map((a) => h('option', { value: a, selected: a === (settings.compression || {}).algorithm }, a || '(none)')));
  const level = h('input', { type: 'number', min: 1, max: 22, value: (settings.compression || {}).level || 3 });
  const remote = h('input', { value: settings.remote || '' });
  const pending = h('select', {}, ['', 'keep', 'delete'].map((p) => h('option', { value: p, selected: p === (settings.pending_replication || '') }, p || '(default: keep)')));
  const when = h('textarea', { rows: 2, cols: 40, spellcheck: 'false' }, settings.when ? JSON.stringify(settings.when) : '');
  const mode = h('select', {}, ['enabled', 'disabled', 'dry_run'].map((m) => h('option', { value: m, selected: m === (settings.mode || 'enabled') }, m)));
  const form = h('form', {
    id: 'policy-form',
    class: 'inline',
    onsubmit: (event) => {
      event.preventDefault();
      const body = {
        type: type.value, bucket: bucket.value.trim(), older_than: olderThan.value.trim(),
        interval: interval.value.trim(), mode: mode.value,
        entries: entries.value.split(',').map((s) => s.trim()).filter(Boolean),
      };
      if (algorithm.value) body.compression = { algorithm: algorithm.value, level: Number(level.value) };
      if (remote.value.trim()) body.remote = remote.value.trim();
      if (pending.value) body.pending_replication = pending.value;
      if (when.value.trim()) {
        try {
          body.when = JSON.parse(when.value);
        } catch (error) {
          onSubmit(null, null, new Error(`The condition is not JSON: ${error.message}`));
          return;
        }
      }
      onSubmit(name.value.trim(), body);
    },
  },
  field('p-name', 'Name', name), field('p-type', 'Type', type), field('p-bucket', 'Bucket', bucket),
  field('p-entries', 'Entries', entries), field('p-older', 'Older than', olderThan),
  field('p-interval', 'Interval', interval), field('p-algorithm', 'Compression', algorithm),
  field('p-level', 'Level', level), field('p-remote', 'Remote (tier)', remote),
  field('p-pending', 'Unreplicated records (delete)', pending),
  field('p-when', 'Condition (when)', when), field('p-mode', 'Mode', mode),
  h('button', { type: 'submit' }, settings.name ? 'Save policy' : 'Create policy'));
  if (settings.name) name.readOnly = true;
  return form;
}

/** Runs policy `name` now and waits for the run to be recorded, showing its progress. */
async function runNow(name, status) {
  const before = (await call(`lifecycles/${segment(name)}`)).info.last_run;
  await call(`lifecycles/${segment(name)}/run`, { method: 'POST' });
  for (let i = 0; i < 600; i += 1) {
    const { info } = await call(`lifecycles/${segment(name)}`);
    if (info.progress) {
      const p = info.progress;
      status.textContent = `running: ${count(p.records_done || 0)} of ${count(p.records_total || 0)} records`;
    }
    if (info.last_run !== before && !info.running_now) {
      status.textContent = `done: ${info.last_status}${info.last_error ? ` (${info.last_error})` : ''}`;
      return;
    }
    await new Promise((resolve) => { setTimeout(resolve, 200); });
  }
}

export async function list(ctx) {
  const { view, go } = ctx;
  const { lifecycles } = await call('lifecycles');
  const problem = h('div');
  const rows = lifecycles.map((p) => {
    const status = h('span', { class: 'muted', role: 'status' });
    return h('tr', {},
      h('td', {}, h('a', { href: `lifecycles/${encodeURIComponent(p.name)}`, 'data-link': true }, p.name)),
      h('td', {}, p.type), h('td', {}, p.mode),
      h('td', {}, p.last_status || '—', p.last_error ? ` (${p.last_error})` : ''),
      h('td', {}, isoTime(p.last_run)), h('td', {}, isoTime(p.next_run)),
      h('td', {}, policyState(p)),
      h('td', { class: 'num' }, count(p.processed_records_total)),
      h('td', { class: 'num' }, bytes(p.bytes_saved_total)),
      h('td', {}, h('button', {
        class: 'secondary',
        type: 'button',
        onclick: async () => {
          try {
            await runNow(p.name, status);
          } catch (error) {
            fill(problem, errorBox(error));
          }
        },
      }, 'Run now'), ' ', status));
  });
  const form = policyForm(async (name, body, invalid) => {
    try {
      if (invalid) throw invalid;
      await call(`lifecycles/${segment(name)}`, { method: 'POST', body });
      go(`lifecycles/${encodeURIComponent(name)}`);
    } catch (error) {
      fill(problem, errorBox(error));
    }
  });
  fill(view,
    h('h1', {}, 'Lifecycle policies'),
    rows.length === 0 ? h('p', { class: 'muted' }, 'No policy yet.') : h('table', { 'aria-label': 'Policies' },
      h('thead', {}, h('tr', {}, ['Name', 'Type', 'Mode', 'Last result', 'Last run', 'Next run', 'State'].map((t) => h('th', {}, t)),
        h('th', { class: 'num' }, 'Records'), h('th', { class: 'num' }, 'Saved'), h('th', {}, ''))),
      h('tbody', {}, rows)),
    problem,
    h('h2', {}, 'New policy'),
    form);
}

/**
 * The latest `TIMELINE_RUNS` events a policy wrote to `$system` before `latest` (µs),
 * oldest first: read over a day back, then a week, a month, then all, so a policy that
 * has written events for years costs no more than its recent ones.
 */
async function runEvents(instance, name, latest) {
  if (!await readable('$system')) return [];
  // Through the bucket's query: an entry not written yet selects nothing (no 404).
  const entry = `lifecycle/${systemSegment(instance)}/${systemSegment(name)}`;
  const DAY = 86_400_000_000n;
  let records = [];
  for (const back of [DAY, 7n * DAY, 31n * DAY, null]) {
    const start = back === null ? undefined : Number(BigInt(latest) - back);
    records = await readBucketRecords('$system', [entry], start === undefined || start < 0 ? {} : { start }, { payloads: true });
    if (records.length >= TIMELINE_RUNS) break;
  }
  return records.slice(-TIMELINE_RUNS).map((r) => ({ ...r, event: json(r) }));
}

/** The timeline of a policy's runs: its events as marks over time; a click shows one. */
function timeline(runs, shown) {
  if (runs.length === 0) return h('p', { class: 'muted' }, 'No run recorded yet.');
  const width = 800;
  const first = Number(runs[0].ts);
  const last = Number(runs[runs.length - 1].ts);
  const x = linear([first, last], [20, width - 20]);
  const at = (run) => (runs.length === 1 ? width / 2 : x(Number(run.ts)));
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} 60`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `${runs.length} runs`);
  const axis = document.createElementNS(NS, 'line');
  for (const [k, v] of Object.entries({ class: 'axis', x1: 10, x2: width - 10, y1: 30, y2: 30 })) axis.setAttribute(k, v);
  svg.append(axis);
  for (const run of runs) {
    const ok = (run.labels.status || '200') === '200';
    const mark = document.createElementNS(NS, 'circle');
    for (const [k, v] of Object.entries({ cx: at(run), cy: 30, r: 6, class: ok ? 'run ok' : 'run failed', tabindex: 0 })) mark.setAttribute(k, v);
    const title = document.createElementNS(NS, 'title');
    const e = run.event;
    const state = e.caught_up ? ', caught up' : `, ${count(e.backlog_records || 0)} records left`;
    title.textContent = `${timestamp(run.ts)}: status ${run.labels.status || '?'}, ${count(e.processed_records || 0)} records, ${(e.duration || 0).toFixed(2)} s${state}`;
    mark.append(title);
    const open = () => fill(shown, h('pre', {}, JSON.stringify(run.event, null, 2)));
    mark.addEventListener('click', open);
    mark.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') open(); });
    svg.append(mark);
  }
  timeAxis(svg, runs.map((r) => millis(r.ts)), runs.map(at), { bottom: 30, left: 10, right: width - 10 });
  return h('figure', { class: 'chart timeline' }, svg,
    h('figcaption', { class: 'muted' }, `${count(runs.length)} run${runs.length === 1 ? '' : 's'} from ${timestamp(first)} to ${timestamp(last)}; a click shows the run's event`));
}

/** Bytes each run saved, and their running total, as columns over the runs. */
function savings(runs) {
  const saved = runs.filter((r) => Number(r.event.bytes_saved || 0) > 0 || r.event.action_type === 'compress');
  if (saved.length === 0) return h('p', { class: 'muted' }, 'No bytes saved yet.');
  let total = 0;
  const cumulative = saved.map((r) => { total += Number(r.event.bytes_saved || 0); return total; });
  return h('figure', { class: 'chart saved' },
    bars(cumulative, (i) => `after the run of ${timestamp(saved[i].ts)}`, { format: bytes, times: saved.map((r) => millis(r.ts)) }),
    h('figcaption', { class: 'muted' }, `Bytes saved in all, run after run: ${bytes(total)}`));
}

/** The records each run left to the next ones, while the policy catches up. */
function backlog(runs) {
  if (!runs.some((r) => Number(r.event.backlog_records || 0) > 0)) {
    return h('p', { class: 'muted' }, 'No backlog: every recorded run caught up.');
  }
  const left = runs.map((r) => Number(r.event.backlog_records || 0));
  return h('figure', { class: 'chart backlog' },
    bars(left, (i) => `left after the run of ${timestamp(runs[i].ts)}`, { format: count, times: runs.map((r) => millis(r.ts)) }),
    h('figcaption', { class: 'muted' }, `Records left to process after each run (whole blocks counted); now ${count(left[left.length - 1])}`));
}

export async function detail(ctx) {
  const { view, route, go } = ctx;
  const name = route.name;
  const policy = await call(`lifecycles/${segment(name)}`);
  const { info, settings } = policy;
  const problem = h('div');
  const status = h('span', { class: 'muted', role: 'status' });
  const shown = h('div', { class: 'preview' }, h('p', { class: 'muted' }, 'Choose a run on the timeline.'));
  let runs = [];
  let runsProblem = null;
  if (info.last_event && info.last_event.instance) {
    runs = await runEvents(info.last_event.instance, name, info.last_event.timestamp).catch((e) => { runsProblem = errorBox(e); return []; });
  }
  const form = policyForm(async (_, body, invalid) => {
    try {
      if (invalid) throw invalid;
      await call(`lifecycles/${segment(name)}`, { method: 'PUT', body });
      go(`lifecycles/${encodeURIComponent(name)}`);
    } catch (error) {
      fill(problem, errorBox(error));
    }
  }, { ...settings, name });
  fill(view,
    h('p', {}, h('a', { href: 'lifecycles', 'data-link': true }, 'Lifecycles'), ' / ', name),
    h('h1', {}, `Policy ${name}`),
    h('div', { class: 'cards' },
      ...[['Type', info.type], ['Mode', info.mode], ['Last result', info.last_status || '—'],
        ['Runs', count(info.total_runs)], ['Records', count(info.processed_records_total)],
        ['Saved', bytes(info.bytes_saved_total)]]
        .map(([label, value]) => card(label, value)),
      isoCard('Next run', info.next_run),
      card('State', policyState(info)),
      card('Backlog', info.caught_up === false ? `${count(info.backlog_records || 0)} records` : '—'),
      timeCard('Processed up to', info.last_processed_ts)),
    h('p', {}, h('button', {
      id: 'run-now',
      type: 'button',
      onclick: async () => {
        try {
          await runNow(name, status);
          go(`lifecycles/${encodeURIComponent(name)}`);
        } catch (error) {
          fill(problem, errorBox(error));
        }
      },
    }, 'Run now'), ' ', status),
    problem,
    h('h2', {}, 'Runs'), runsProblem || timeline(runs, shown),
    h('div', { class: 'pair' },
      h('section', {}, h('h2', {}, 'Backlog while catching up'), backlog(runs)),
      h('section', {}, h('h2', {}, 'Bytes saved over time'), savings(runs))),
    shown,
    h('h2', {}, 'Settings'), form,
    h('h2', {}, 'Danger zone'),
    h('button', {
      class: 'danger',
      type: 'button',
      onclick: async () => {
        // eslint-disable-next-line no-alert
        if (!window.confirm(`Remove policy '${name}'?`)) return;
        try {
          await call(`lifecycles/${segment(name)}`, { method: 'DELETE' });
          go('lifecycles');
        } catch (error) {
          fill(problem, errorBox(error));
        }
      },
    }, 'Remove policy'));
}
