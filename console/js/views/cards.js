// The cards at the top of a page: a label over a value, and for an instant its date with
// the time to the second under it and the exact value on hover (a microsecond timestamp
// would wrap over three lines in a card).

import { h } from '../dom.js';
import { dateAndTime, timestamp } from '../format.js';

/** A card of `label` over `value`. */
export function card(label, value) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
}

/** A card of an instant given as microseconds since the epoch ('—' when none). */
export function timeCard(label, us) {
  const parts = us === undefined || us === null ? null : dateAndTime(us);
  if (!parts) return card(label, '—');
  return instant(label, parts, `${timestamp(us)} UTC (${us} µs)`);
}

/** A card of an instant given as RFC 3339 text ('—' when none). */
export function isoCard(label, text) {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(text || '');
  if (!m) return card(label, text || '—');
  return instant(label, [m[1], m[2]], String(text));
}

function instant(label, [date, time], exact) {
  return h('div', { class: 'card', title: exact },
    h('div', { class: 'label' }, label),
    h('div', { class: 'value' }, h('time', { datetime: `${date}T${time}Z` }, date)),
    h('div', { class: 'sub' }, `${time} UTC`));
}
