// API tokens: listed with their permissions, created with permissions (the value shown
// once, with a copy button), rotated, removed after confirmation.

import { call, segment } from '../api.js';
import { errorBox, fill, h } from '../dom.js';
import { isoTime } from '../format.js';

function names(text) {
  return text.split(',').map((s) => s.trim()).filter(Boolean);
}

/** The value of a token just made, shown once. */
function secret(value) {
  const field = h('input', { id: 'token-value', 'aria-label': 'new token value', readonly: true, value, size: Math.max(20, value.length) });
  const copied = h('span', { class: 'muted', role: 'status' });
  return h('div', { class: 'card' },
    h('p', {}, 'The token\'s value, shown this once:'),
    field, ' ',
    h('button', {
      type: 'button',
      class: 'secondary',
      onclick: async () => {
        field.select();
        try {
          await navigator.clipboard.writeText(value);
          copied.textContent = ' copied';
        } catch {
          copied.textContent = ' selected: copy it with Ctrl+C';
        }
      },
    }, 'Copy'), copied);
}

export async function show(ctx) {
  const { view } = ctx;
  const { tokens } = await call('tokens');
  const problem = h('div');
  const shown = h('div');
  const name = h('input', { id: 'token-name', required: true, pattern: '[A-Za-z0-9_\\-]+' });
  const full = h('input', { id: 'token-full', type: 'checkbox' });
  const read = h('input', { id: 'token-read', placeholder: 'bucket, bucket…' });
  const write = h('input', { id: 'token-write', placeholder: 'bucket, bucket…' });
  const create = h('form', {
    id: 'create-token',
    class: 'inline',
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        const made = await call(`tokens/${segment(name.value.trim())}`, {
          method: 'POST',
          body: { full_access: full.checked, read: names(read.value), write: names(write.value) },
        });
        await show(ctx);
        fill(document.getElementById('token-secret'), secret(made.value));
      } catch (error) {
        fill(problem, errorBox(error));
      }
    },
  },
  h('label', { for: 'token-name' }, 'Name', name),
  h('label', { for: 'token-full' }, 'Full access', full),
  h('label', { for: 'token-read' }, 'Read buckets', read),
  h('label', { for: 'token-write' }, 'Write buckets', write),
  h('button', { type: 'submit' }, 'Create token'));
  const act = (token, what) => async () => {
    try {
      if (what === 'remove') {
        // eslint-disable-next-line no-alert
        if (!window.confirm(`Remove token '${token.name}'?`)) return;
        await call(`tokens/${segment(token.name)}`, { method: 'DELETE' });
        await show(ctx);
      } else {
        const rotated = await call(`tokens/${segment(token.name)}/rotate`, { method: 'POST' });
        await show(ctx);
        fill(document.getElementById('token-secret'), secret(rotated.value));
      }
    } catch (error) {
      fill(problem, errorBox(error));
    }
  };
  const rows = tokens.map((t) => h('tr', {},
    h('td', {}, t.name),
    h('td', {}, t.permissions.full_access ? 'full access' : ''),
    h('td', {}, (t.permissions.read || []).join(', ')),
    h('td', {}, (t.permissions.write || []).join(', ')),
    h('td', {}, isoTime(t.created_at)),
    h('td', {}, t.is_provisioned ? h('span', { class: 'muted' }, 'provisioned') : [
      h('button', { class: 'secondary', type: 'button', onclick: act(t, 'rotate') }, 'Rotate'), ' ',
      h('button', { class: 'danger', type: 'button', onclick: act(t, 'remove') }, 'Remove'),
    ])));
  fill(view,
    h('h1', {}, 'Tokens'),
    h('div', { id: 'token-secret' }),
    shown,
    h('table', { 'aria-label': 'Tokens' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Access'), h('th', {}, 'Read'), h('th', {}, 'Write'), h('th', {}, 'Created'), h('th', {}, ''))),
      h('tbody', {}, rows)),
    h('h2', {}, 'New token'),
    create,
    problem);
}
