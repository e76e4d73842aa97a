// A small helper to build elements without HTML strings (no markup from data is ever
// parsed: every value goes in as text).

/** An element `tag` with `attrs` (`on…` functions become listeners) and `children`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces the children of `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat()) {
    if (child !== undefined && child !== null && child !== false) el.append(child);
  }
  return el;
}

/** A box showing an API error with the server's own message. */
export function errorBox(error) {
  const status = error && error.status ? `${error.status}: ` : '';
  return h('div', { class: 'error', role: 'alert' }, `${status}${error && error.message ? error.message : error}`);
}
