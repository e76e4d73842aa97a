// Charts drawn in SVG by the console itself: a linear scale, bar charts over time with a
// time axis at round instants. The scale and tick functions are pure and unit-tested
// with Node.

/** A linear map from [d0, d1] to [r0, r1] (a flat domain maps to r0). */
export function linear([d0, d1], [r0, r1]) {
  const span = d1 - d0;
  return (x) => (span === 0 ? r0 : r0 + ((x - d0) / span) * (r1 - r0));
}

/** About `n` round tick values covering [lo, hi]. */
export function ticks(lo, hi, n = 4) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** Steps a time axis may take, in ms: each a round span of the clock or the calendar. */
const TIME_STEPS = [
  10, 20, 50, 100, 200, 500,
  SECOND, 2 * SECOND, 5 * SECOND, 10 * SECOND, 15 * SECOND, 30 * SECOND,
  MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 30 * MINUTE,
  HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR,
  DAY, 2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY, 91 * DAY, 182 * DAY, 364 * DAY,
];

/**
 * About `n` ticks at round instants (UTC) inside [startMs, stopMs], each `{ ms, label }`:
 * the step is the first of 10 ms, 20 ms … a second, 2 s … a day, a week … a year that
 * gives at most `n` ticks; labels show what the step needs — milliseconds under a
 * second, the time to the second under a minute, to the minute under a day (with the
 * date when the range crosses midnight), the date from a day up. A range too short to
 * hold a round instant, or an empty one, gives its first instant.
 */
export function timeTicks(startMs, stopMs, n = 5) {
  const start = Number(startMs);
  const stop = Number(stopMs);
  if (!Number.isFinite(start)) return [];
  if (!(stop > start)) return [{ ms: start, label: timeLabel(start, SECOND, false) }];
  const raw = (stop - start) / Math.max(1, n);
  const step = TIME_STEPS.find((s) => s >= raw) || Math.ceil(raw / (364 * DAY)) * 364 * DAY;
  const crossesDays = Math.floor(start / DAY) !== Math.floor(stop / DAY);
  const out = [];
  for (let t = Math.ceil(start / step) * step; t <= stop; t += step) {
    out.push({ ms: t, label: timeLabel(t, step, crossesDays) });
  }
  return out.length > 0 ? out : [{ ms: start, label: timeLabel(start, Math.min(step, 10), false) }];
}

/** The label of a tick at `ms` on an axis stepping `step` ms. */
function timeLabel(ms, step, withDate) {
  const iso = new Date(ms).toISOString();
  const date = iso.slice(0, 10);
  if (step >= DAY) return date;
  if (step >= MINUTE) return withDate ? `${date.slice(5)} ${iso.slice(11, 16)}` : iso.slice(11, 16);
  if (step >= SECOND) return iso.slice(11, 19);
  return iso.slice(11, 23);
}

/**
 * Where instant `ms` falls on an axis whose points are at `xs` (pixels) for the instants
 * `times` (ms, in order): between the two points around it, in proportion; `null`
 * outside them.
 */
export function placeInstant(ms, times, xs) {
  if (times.length === 0) return null;
  if (times.length === 1) return ms === times[0] ? xs[0] : null;
  for (let i = 0; i + 1 < times.length; i += 1) {
    const [a, b] = [times[i], times[i + 1]];
    if (ms >= a && ms <= b) return b === a ? xs[i] : xs[i] + ((ms - a) / (b - a)) * (xs[i + 1] - xs[i]);
  }
  return null;
}

/**
 * Stretches of a round span (µs) over [startUs, stopUs), at most `n` of them, as the
 * server cuts an entry's histogram: `{ first, step, count }`, `step` the shortest of the
 * time axis's steps (a millisecond … an hour, a day, a week …; microseconds below) that
 * covers the range in `n` stretches from the round instant at or before its start
 * (a Monday for weeks).
 */
export function roundStretches(startUs, stopUs, n) {
  const start = Number(startUs);
  const stop = Math.max(Number(stopUs), start + 1);
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, ...TIME_STEPS.map((ms) => ms * 1000)];
  const monday = 4 * DAY * 1000;
  const align = (step) => {
    const origin = step % (7 * DAY * 1000) === 0 && start >= monday ? monday : 0;
    return origin + Math.floor((start - origin) / step) * step;
  };
  const longest = steps[steps.length - 1];
  for (let i = 0; ; i += 1) {
    const step = i < steps.length ? steps[i] : (i - steps.length + 2) * longest;
    const first = align(step);
    const count = Math.ceil((stop - first) / step);
    if (count <= Math.max(1, n)) return { first, step, count };
  }
}

/** The values of `points` ([x, value] pairs) summed per one of `buckets` equal spans of [start, stop). */
export function histogram(points, start, stop, buckets) {
  const sums = new Array(buckets).fill(0);
  const width = (stop - start) / buckets;
  for (const [x, value] of points) {
    if (x < start || x >= stop || width <= 0) continue;
    sums[Math.min(buckets - 1, Math.floor((x - start) / width))] += value;
  }
  return sums;
}

const SVG = 'http://www.w3.org/2000/svg';

function node(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

/**
 * Labels of round instants under an SVG's line `bottom`, for points at pixels `xs` that
 * stand for the instants `times` (ms, in order), kept inside [left, right].
 */
export function timeAxis(svg, times, xs, { bottom, left, right }) {
  if (times.length === 0) return;
  for (const tick of timeTicks(times[0], times[times.length - 1])) {
    const at = placeInstant(tick.ms, times, xs);
    if (at === null) continue;
    svg.append(node('line', { class: 'axis tick', x1: at, x2: at, y1: bottom, y2: bottom + 4 }));
    const x = Math.min(right - 24, Math.max(left + 24, at));
    const label = node('text', { class: 'time-label', x, y: bottom + 14, 'text-anchor': 'middle' }, tick.label);
    label.append(node('title', {}, new Date(tick.ms).toISOString()));
    svg.append(label);
  }
}

/**
 * An SVG of `count` columns under values up to `top`, with its value axis and, given
 * `times` (the instant of each column, ms, in order), a time axis under it: the svg, the
 * value scale `y`, the left edge `x(i)` and `width` of column i, and the `bottom` line.
 */
function columns(count, top, { width, height, format, times }) {
  const svg = node('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img' });
  const left = 56;
  const bottom = height - 18;
  const y = linear([0, Math.max(1, top)], [bottom, 8]);
  const step = (width - left - 4) / Math.max(1, count);
  for (const t of ticks(0, Math.max(1, top), 3)) {
    svg.append(node('line', { class: 'axis', x1: left, x2: width, y1: y(t), y2: y(t) }));
    svg.append(node('text', { x: left - 4, y: y(t) + 3, 'text-anchor': 'end' }, format(t)));
  }
  const x = (i) => left + i * step + 1;
  if (times && times.length === count) {
    const centres = times.map((_, i) => x(i) + Math.max(1, step - 2) / 2);
    timeAxis(svg, times, centres, { bottom, left, right: width });
  }
  return { svg, y, bottom, x, width: Math.max(1, step - 2) };
}

/**
 * An SVG bar chart of `values` with a title for each bar from `label(i)`, and a time axis
 * when `times` gives each bar's instant (ms).
 */
export function bars(values, label, { width = 600, height = 180, format = String, times } = {}) {
  const { svg, y, bottom, x, width: barWidth } = columns(values.length, Math.max(...values, 1), { width, height, format, times });
  values.forEach((v, i) => {
    const bar = node('rect', {
      class: 'bar', x: x(i), y: y(v), width: barWidth, height: bottom - y(v),
    });
    bar.append(node('title', {}, `${label(i)}: ${format(v)}`));
    svg.append(bar);
  });
  return svg;
}

/** The CSS class of a storage tier's colour: open/none raw, lz4, zstd-N, remote NAME. */
export function tierClass(tier) {
  if (tier.startsWith('remote')) return 'tier-remote';
  if (tier.startsWith('zstd')) return 'tier-zstd';
  if (tier === 'lz4') return 'tier-lz4';
  return 'tier-raw';
}

/** A horizontal bar of `parts` ([{label, value}]) side by side, each its share wide. */
export function stacked(parts, { width = 800, height = 28, format = String } = {}) {
  const svg = node('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'stacked' });
  const total = parts.reduce((sum, p) => sum + p.value, 0);
  const x = linear([0, Math.max(1, total)], [0, width]);
  let at = 0;
  for (const part of parts) {
    const rect = node('rect', {
      x: x(at), y: 0, width: Math.max(0, x(at + part.value) - x(at)), height, class: tierClass(part.label),
    });
    rect.append(node('title', {}, `${part.label}: ${format(part.value)}`));
    svg.append(rect);
    at += part.value;
  }
  return svg;
}

/**
 * `series` ([{x, parts: {label: value}}], in x order) thinned to at most `points`
 * evenly spaced items (the last one kept): a chart's bounded number of points.
 */
export function thin(series, points) {
  if (series.length <= points) return series;
  const step = series.length / points;
  const out = [];
  for (let i = 0; i < points - 1; i += 1) out.push(series[Math.floor(i * step)]);
  out.push(series[series.length - 1]);
  return out;
}

/**
 * Columns of stacked `parts` per item of `series` ([{x, parts: {label: value}}]), and a
 * time axis when `times` gives each item's instant (ms).
 */
export function stackedColumns(series, label, { width = 800, height = 180, format = String, times } = {}) {
  const totals = series.map((s) => Object.values(s.parts).reduce((a, b) => a + b, 0));
  const { svg, y, x, width: barWidth } = columns(series.length, Math.max(1, ...totals), { width, height, format, times });
  series.forEach((item, i) => {
    let base = 0;
    for (const [tier, value] of Object.entries(item.parts)) {
      const rect = node('rect', {
        x: x(i), y: y(base + value), width: barWidth,
        height: y(base) - y(base + value), class: tierClass(tier),
      });
      rect.append(node('title', {}, `${label(item)} ${tier}: ${format(value)}`));
      svg.append(rect);
      base += value;
    }
  });
  return svg;
}
