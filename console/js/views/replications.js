// Replication tasks: listed with their state and pending records, created and edited
// with their settings, their mode switched, their backlog over time charted, their
// diagnostics shown, removed after confirmation.

import { call, readable, segment } from '../api.js';
import { json, readBucketRecords } from '../batch.js';
import { bars, thin } from '../chart.js';
import { errorBox, fill, h } from '../dom.js';
import { count, duration, millis, timestamp } from '../format.js';
import { systemSegment } from '../protocol.js';

function taskForm(onSubmit, settings = {}, name = '') {
  const inputs = {
    name: h('input', { id: 'r-name', required: true, value: name, readonly: Boolean(name) }),
    src_bucket: h('input', { id: 'r-src', required: true, value: settings.src_bucket || '' }),
    dst_bucket: h('input', { id: 'r-dst', required: true, value: settings.dst_bucket || '' }),
    dst_host: h('input', { id: 'r-host', required: true, placeholder: 'http://host:8383', value: settings.dst_host || '' }),
    dst_token: h('input', { id: 'r-token', type: 'password', autocomplete: 'new-password', placeholder: name ? '(unchanged)' : '' }),
    entries: h('input', { id: 'r-entries', placeholder: 'all', value: (settings.entries || []).join(', ') }),
    when: h('textarea', { id: 'r-when', rows: 2, cols: 40, spellcheck: 'false' }, settings.when ? JSON.stringify(settings.when) : ''),
  };
  const labels = {
    name: 'Name', src_bucket: 'Source bucket', dst_bucket: 'Destination bucket', dst_host: 'Destination',
    dst_token: 'Destination token', entries: 'Entries', when: 'Condition (when)',
  };
  return h('form', {
    id: 'replication-form',
    class: 'inline',
    onsubmit: (event) => {
      event.preventDefault();
      const body = {
        src_bucket: inputs.src_bucket.value.trim(),
        dst_bucket: inputs.dst_bucket.value.trim(),
        dst_host: inputs.dst_host.value.trim(),
        entries: inputs.entries.value.split(',').map((s) => s.trim()).filter(Boolean),
      };
      if (inputs.dst_token.value) body.dst_token = inputs.dst_token.value;
      try {
        if (inputs.when.value.trim()) body.when = JSON.parse(inputs.when.value);
      } catch (error) {
        onSubmit(null, null, new Error(`The condition is not JSON: ${error.message}`));
        return;
      }
      onSubmit(inputs.name.value.trim(), body);
    },
  }, Object.entries(inputs).map(([key, input]) => h('label', { for: input.id }, labels[key], input)),
  h('button', { type: 'submit' }, name ? 'Save task' : 'Create task'));
}

export async function list({ view, go }) {
  const { replications } = await call('replications');
  const problem = h('div');
  const rows = replications.map((r) => h('tr', {},
    h('td', {}, h('a', { href: `replications/${encodeURIComponent(r.name)}`, 'data-link': true }, r.name)),
    h('td', {}, r.mode || ''),
    h('td', {}, r.is_active ? 'active' : 'destination away'),
    h('td', { class: 'num' }, count(r.pending_records))));
  fill(view,
    h('h1', {}, 'Replications'),
    rows.length === 0 ? h('p', { class: 'muted' }, 'No replication task.') : h('table', { 'aria-label': 'Replications' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Mode'), h('th', {}, 'State'), h('th', { class: 'num' }, 'Pending records'))),
      h('tbody', {}, rows)),
    h('h2', {}, 'New task'),
    taskForm(async (name, body, invalid) => {
      try {
        if (invalid) throw invalid;
        await call(`replications/${segment(name)}`, { method: 'POST', body });
        go(`replications/${encodeURIComponent(name)}`);
      } catch (error) {
        fill(problem, errorBox(error));
      }
    }),
    problem);
}

/** Points of the backlog history at most. */
const HISTORY_POINTS = 120;

/**
 * The task's backlog over the last day, from the events its sender writes to `$system`
 * (`replications/<instance>/<task>`): one per summary of passes, and a snapshot a minute
 * while records wait unsent (paused, disabled). Pending records and the lag of the oldest.
 */
async function history(instance, name) {
  const entry = `replications/${systemSegment(instance)}/${systemSegment(name)}`;
  const start = Date.now() * 1000 - 86400e6;
  if (!await readable('$system')) return h('p', { class: 'muted' }, 'No pass or backlog recorded in the last day.');
  const events = (await readBucketRecords('$system', [entry], { start }, { payloads: true })).map(json);
  if (events.length === 0) return h('p', { class: 'muted' }, 'No pass or backlog recorded in the last day.');
  const points = thin(events, HISTORY_POINTS);
  const when = (i) => timestamp(points[i].timestamp);
  const times = points.map((e) => millis(e.timestamp));
  return h('div', { class: 'history' },
    h('figure', { class: 'chart pending' },
      bars(points.map((e) => e.pending_records || 0), (i) => `pending at ${when(i)}`, { format: count, times }),
      h('figcaption', { class: 'muted' }, `Pending records, ${count(points.length)} snapshot${points.length === 1 ? '' : 's'} from ${when(0)} to ${when(points.length - 1)}`)),
    h('figure', { class: 'chart lag' },
      bars(points.map((e) => e.lag_seconds || 0), (i) => `lag at ${when(i)}`, { format: (s) => duration(Math.round(s)), times }),
      h('figcaption', { class: 'muted' }, 'Lag: how long the oldest pending record had waited')));
}

export async function detail({ view, route, go }) {
  const name = route.name;
  const [task, server] = await Promise.all([call(`replications/${segment(name)}`), call('info')]);
  const problem = h('div');
  const mode = h('select', { id: 'r-mode' }, ['enabled', 'paused', 'disabled'].map((m) => h('option', { value: m, selected: m === (task.settings.mode || task.info.mode) }, m)));
  fill(view,
    h('p', {}, h('a', { href: 'replications', 'data-link': true }, 'Replications'), ' / ', name),
    h('h1', {}, `Replication ${name}`),
    h('div', { class: 'cards' },
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'State'), h('div', { class: 'value' }, task.info.is_active ? 'active' : 'destination away')),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Pending records'), h('div', { class: 'value' }, count(task.info.pending_records)))),
    h('form', {
      class: 'inline',
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          await call(`replications/${segment(name)}/mode`, { method: 'PATCH', body: { mode: mode.value } });
          go(`replications/${encodeURIComponent(name)}`);
        } catch (error) {
          fill(problem, errorBox(error));
        }
      },
    }, h('label', { for: 'r-mode' }, 'Mode', mode), h('button', { type: 'submit' }, 'Set mode')),
    problem,
    h('h2', {}, 'Backlog over time'),
    await history(server.instance_name || '', name).catch((e) => errorBox(e)),
    h('h2', {}, 'Diagnostics'),
    h('pre', { class: 'preview' }, JSON.stringify(task.diagnostics || {}, null, 2)),
    h('h2', {}, 'Settings'),
    taskForm(async (_, body, invalid) => {
      try {
        if (invalid) throw invalid;
        await call(`replications/${segment(name)}`, { method: 'PUT', body });
        go(`replications/${encodeURIComponent(name)}`);
      } catch (error) {
        fill(problem, errorBox(error));
      }
    }, task.settings, name),
    h('h2', {}, 'Danger zone'),
    h('button', {
      class: 'danger',
      type: 'button',
      onclick: async () => {
        // eslint-disable-next-line no-alert
        if (!window.confirm(`Remove replication '${name}'?`)) return;
        try {
          await call(`replications/${segment(name)}`, { method: 'DELETE' });
          go('replications');
        } catch (error) {
          fill(problem, errorBox(error));
        }
      },
    }, 'Remove task'));
}
