// The login page: asks for an API token, checks it against `/me` (or `/info` when
// authentication is off), keeps it in sessionStorage, and goes where the caller was.

import { call, setToken } from '../api.js';
import { errorBox, fill, h } from '../dom.js';

export async function show({ view, route, go }) {
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'current-password', required: true });
  const problem = h('div');
  const form = h('form', {
    onsubmit: async (event) => {
      event.preventDefault();
      setToken(input.value.trim());
      try {
        await call('info');
        go(route.params.next || './');
      } catch (error) {
        setToken('');
        fill(problem, errorBox(error));
      }
    },
  },
  h('h1', {}, 'Log in'),
  h('label', { for: 'token' }, 'API token', input),
  problem,
  h('button', { type: 'submit' }, 'Log in'));
  fill(view, h('div', { class: 'login' }, form));
  input.focus();
}
