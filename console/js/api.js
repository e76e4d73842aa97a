// Calls to the halflife (ReductStore) HTTP API from the console: the token kept in
// sessionStorage (never in a URL or a cookie) sent as `Authorization: Bearer`, errors
// carrying the server's own message (`x-reduct-error`).

const TOKEN_KEY = 'halflife.token';

/** The API's root, beside the console's base (`…/ui/` → `…/api/v1/`). */
export const root = new URL('../api/v1/', document.baseURI);

/** The token of this tab's session, or ''. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

/** Keeps `value` as this tab's token ('' forgets it). */
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An answer other than 2xx: its status and the server's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * Calls `path` (relative to the API root). A plain-object `body` is sent as JSON; a Blob
 * or ArrayBuffer as it is. Returns the parsed JSON for a JSON answer (unless `raw`: a
 * record's payload may be JSON too), else the Response.
 */
export async function call(path, { method = 'GET', body, headers = {}, raw = false } = {}) {
  const sent = new Headers(headers);
  const bearer = token();
  if (bearer) sent.set('authorization', `Bearer ${bearer}`);
  let payload = body;
  if (body !== undefined && body !== null && !(body instanceof Blob)
      && !(body instanceof ArrayBuffer) && typeof body === 'object') {
    payload = JSON.stringify(body);
    sent.set('content-type', 'application/json');
  }
  const response = await fetch(new URL(path, root), { method, headers: sent, body: payload });
  if (!response.ok) {
    throw new ApiError(response.status, response.headers.get('x-reduct-error') || response.statusText);
  }
  const type = response.headers.get('content-type') || '';
  if (!raw && method !== 'HEAD' && type.includes('application/json')) return response.json();
  return response;
}

/** A path segment (bucket or entry name, an entry's slashes kept). */
export function segment(name) {
  return name.split('/').map(encodeURIComponent).join('/');
}

/**
 * Whether bucket `name` exists and this token may read it, from the bucket list: asked
 * before reading a bucket that may not be there yet (`$system` appears with the first
 * event), so no view makes a call it expects to fail.
 */
export async function readable(name) {
  const list = await call('list');
  return (list.buckets || []).some((b) => b.name === name);
}
