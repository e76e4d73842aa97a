// The console's entry point: routes the path under /ui/ to a view, keeps links inside
// the page (history API, so deep links survive a reload), and sends a caller without a
// valid token to the login page.

import { ApiError, setToken, token } from './api.js';
import { errorBox, fill, h } from './dom.js';
import { parse, section } from './route.js';
import * as bucket from './views/bucket.js';
import * as dashboard from './views/dashboard.js';
import * as entry from './views/entry.js';
import * as lifecycles from './views/lifecycles.js';
import * as login from './views/login.js';
import * as replications from './views/replications.js';
import * as tokens from './views/tokens.js';

const view = document.getElementById('view');
const views = {
  dashboard: dashboard.show,
  bucket: bucket.show,
  entry: entry.show,
  login: login.show,
  tokens: tokens.show,
  lifecycles: lifecycles.list,
  lifecycle: lifecycles.detail,
  replications: replications.list,
  replication: replications.detail,
  notFound: (ctx) => fill(ctx.view, h('h1', {}, 'Not found'), h('p', {}, h('a', { href: './', 'data-link': true }, 'Back to the dashboard'))),
};

/** Goes to `href` (relative to the console's base) and shows its view. */
export function go(href) {
  const url = new URL(href, document.baseURI);
  history.pushState(null, '', url);
  render();
}

async function render() {
  const base = new URL(document.baseURI).pathname;
  const path = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : '';
  const route = parse(path, location.search);
  document.getElementById('logout').hidden = !token();
  const current = section(route);
  for (const a of document.querySelectorAll('header nav a')) {
    if (a.getAttribute('href') === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const ctx = { view, route, go };
  fill(view, h('p', { class: 'muted' }, 'Loading…'));
  try {
    await views[route.view](ctx);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401 && route.view !== 'login') {
      const next = path + location.search;
      go(`login?next=${encodeURIComponent(next)}`);
      return;
    }
    fill(view, errorBox(error));
  }
  view.focus({ preventScroll: true });
}

document.addEventListener('click', (event) => {
  const a = event.target.closest('a[data-link]');
  if (!a || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  go(a.getAttribute('href'));
});
window.addEventListener('popstate', render);
document.getElementById('logout').addEventListener('click', () => {
  setToken('');
  go('login');
});
render();
