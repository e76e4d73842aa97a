// The console's routes: a path under /ui/ (relative to the page's base) and its query
// parameters, to and from what a view needs. Pure functions, unit-tested with Node.

/**
 * The view a path names: `''` → dashboard, `b/<bucket>` → bucket, `b/<bucket>/<entry…>`
 * → entry (an entry name may hold slashes), `login`, `tokens`, `lifecycles`,
 * `lifecycles/<name>`, `replications`, `replications/<name>`; anything else → notFound.
 */
export function parse(path, search = '') {
  const params = Object.fromEntries(new URLSearchParams(search));
  const parts = path.split('/').filter((p) => p !== '').map(decodeURIComponent);
  if (parts.length === 0) return { view: 'dashboard', params };
  if (parts[0] === 'login' && parts.length === 1) return { view: 'login', params };
  if (parts[0] === 'tokens' && parts.length === 1) return { view: 'tokens', params };
  if (parts[0] === 'lifecycles' && parts.length === 1) return { view: 'lifecycles', params };
  if (parts[0] === 'lifecycles' && parts.length === 2) return { view: 'lifecycle', name: parts[1], params };
  if (parts[0] === 'replications' && parts.length === 1) return { view: 'replications', params };
  if (parts[0] === 'replications' && parts.length === 2) return { view: 'replication', name: parts[1], params };
  if (parts[0] === 'b' && parts.length === 2) return { view: 'bucket', bucket: parts[1], params };
  if (parts[0] === 'b' && parts.length > 2) {
    return { view: 'entry', bucket: parts[1], entry: parts.slice(2).join('/'), params };
  }
  return { view: 'notFound', params };
}

/** The relative link of a bucket, or of one of its entries, with `params` (dropped when empty). */
export function link(bucket, entry, params = {}) {
  let path = `b/${encodeURIComponent(bucket)}`;
  if (entry) path += `/${entry.split('/').map(encodeURIComponent).join('/')}`;
  const query = new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ''),
  ).toString();
  return query ? `${path}?${query}` : path;
}

/**
 * The navigation link a route belongs under (its `href` in the top bar): a bucket's and
 * an entry's pages under the dashboard, `$system`'s under the system trail; none for the
 * login and unknown pages.
 */
export function section(route) {
  switch (route.view) {
    case 'dashboard': return './';
    case 'bucket':
    case 'entry': return route.bucket === '$system' ? 'b/%24system' : './';
    case 'lifecycles':
    case 'lifecycle': return 'lifecycles';
    case 'replications':
    case 'replication': return 'replications';
    case 'tokens': return 'tokens';
    default: return null;
  }
}
