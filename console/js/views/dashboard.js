// The dashboard: the server (version, uptime, usage, role) and its buckets, with a form
// to create one.

import { call, segment } from '../api.js';
import { errorBox, fill, h } from '../dom.js';
import { bytes, count, duration, timestamp } from '../format.js';
import { card, timeCard } from './cards.js';
import { link } from '../route.js';


export async function show({ view, go }) {
  const [info, list] = await Promise.all([call('info'), call('list')]);
  const problem = h('div');
  const name = h('input', { id: 'new-bucket', name: 'bucket', required: true, pattern: '[A-Za-z0-9_\\-]+' });
  const create = h('form', {
    id: 'create-bucket',
    class: 'inline',
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        await call(`b/${segment(name.value.trim())}`, { method: 'POST', body: {} });
        go(link(name.value.trim()));
      } catch (error) {
        fill(problem, errorBox(error));
      }
    },
  }, h('label', { for: 'new-bucket' }, 'New bucket', name), h('button', { type: 'submit' }, 'Create bucket'));
  const rows = (list.buckets || []).map((b) => h('tr', {},
    h('td', {}, h('a', { href: link(b.name), 'data-link': true }, b.name)),
    h('td', { class: 'num' }, count(b.entry_count)),
    h('td', { class: 'num' }, bytes(b.size)),
    h('td', {}, timestamp(b.oldest_record)),
    h('td', {}, timestamp(b.latest_record))));
  fill(view,
    h('h1', {}, 'Dashboard'),
    h('div', { class: 'cards' },
      // halflife's own version; `version` is the ReductStore API it answers as.
      card('Version', info.halflife_version ? `halflife ${info.halflife_version} (ReductStore API ${info.version})` : info.version),
      // A PRIMARY or SECONDARY that answers is the active one of its pair.
      card('Role', info.instance_state ? `${info.instance_role} (${info.instance_state})` : info.instance_role || '—'),
      card('Uptime', duration(info.uptime)),
      card('Usage', bytes(info.usage)),
      card('Buckets', count(info.bucket_count)),
      timeCard('Oldest record', info.oldest_record),
      timeCard('Latest record', info.latest_record)),
    h('h2', {}, 'Buckets'),
    create,
    problem,
    rows.length === 0
      ? h('p', { class: 'muted' }, 'No bucket yet.')
      : h('table', { 'aria-label': 'Buckets' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', { class: 'num' }, 'Entries'), h('th', { class: 'num' }, 'Size'), h('th', {}, 'Oldest'), h('th', {}, 'Latest'))),
        h('tbody', {}, rows)));
}
