// An entry's attachments: the records of its hidden `<entry>/$meta` entry, one per `key`
// label, JSON payloads. Listed when asked, through the bucket's multi-entry query (where
// an entry without attachments selects nothing instead of answering 404), each edited in
// place (a write is an upsert by key), a new one added, one
// removed (a `remove=true` label: attachments are not deleted, they are tombstoned).

import { call, segment } from '../api.js';
import { json, readBucketRecords } from '../batch.js';
import { errorBox, fill, h } from '../dom.js';

/** A panel listing the attachments of entry `entry` of bucket `bucket`. */
export function panel(bucket, entry) {
  const meta = `b/${segment(bucket)}/${segment(entry)}/${segment('$meta')}`;
  const box = h('div', { class: 'attachments' });
  const problem = h('div');

  const save = async (key, text) => {
    const body = JSON.parse(text); // refused before anything is sent when it is not JSON
    const ts = BigInt(Date.now()) * 1000n;
    await call(`${meta}?ts=${ts}`, {
      method: 'POST',
      body: new Blob([JSON.stringify(body)]),
      headers: { 'content-type': 'application/json', 'x-reduct-label-key': key },
    });
  };

  async function load() {
    const records = await readBucketRecords(bucket, [`${entry}/$meta`], {}, { payloads: true });
    const rows = records.map((r) => {
      const key = r.labels.key || '';
      const value = h('textarea', { 'aria-label': `attachment ${key}`, rows: 2, cols: 50, spellcheck: 'false' }, JSON.stringify(json(r)));
      return h('tr', {},
        h('td', {}, key),
        h('td', {}, value),
        h('td', {},
          h('button', {
            class: 'secondary', type: 'button',
            onclick: async () => {
              try { await save(key, value.value); await load(); } catch (error) { fill(problem, errorBox(error)); }
            },
          }, 'Save'), ' ',
          h('button', {
            class: 'danger', type: 'button',
            onclick: async () => {
              try {
                await call(`${meta}?ts=${r.ts}`, { method: 'PATCH', headers: { 'x-reduct-label-remove': 'true' } });
                await load();
              } catch (error) { fill(problem, errorBox(error)); }
            },
          }, 'Remove')));
    });
    const newKey = h('input', { id: 'attachment-key', required: true });
    const newValue = h('textarea', { id: 'attachment-value', rows: 2, cols: 40, spellcheck: 'false' }, '{}');
    const refresh = h('button', {
      id: 'refresh-attachments', class: 'secondary', type: 'button',
      onclick: () => load().catch((error) => fill(problem, errorBox(error))),
    }, 'Refresh');
    fill(box,
      rows.length === 0 ? h('p', { class: 'muted' }, 'No attachments. ', refresh) : h('table', { 'aria-label': 'Attachments' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Key'), h('th', {}, 'Value (JSON)'), h('th', {}, ''))),
        h('tbody', {}, rows)),
      rows.length === 0 ? '' : h('p', {}, refresh),
      h('form', {
        id: 'attachment-form',
        class: 'inline',
        onsubmit: async (event) => {
          event.preventDefault();
          try { await save(newKey.value.trim(), newValue.value); await load(); } catch (error) { fill(problem, errorBox(error)); }
        },
      }, h('label', { for: 'attachment-key' }, 'Key', newKey), h('label', { for: 'attachment-value' }, 'Value (JSON)', newValue),
      h('button', { type: 'submit' }, 'Attach')),
      problem);
  }

  fill(box, h('button', {
    id: 'show-attachments',
    class: 'secondary',
    type: 'button',
    onclick: () => load().catch((error) => fill(problem, errorBox(error))),
  }, 'Show attachments'), problem);
  return box;
}
