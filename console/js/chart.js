// Charts drawn in SVG by the console itself: a linear scale and a bar chart over time.
// The scale functions are pure and unit-tested with Node.

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
 * An SVG of `count` columns under values up to `top`, with its value axis: the svg, the
 * value scale `y`, the left edge `x(i)` and `width` of column i, and the `bottom` line.
 */
function columns(count, top, { width, height, format }) {
  const svg = node('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img' });
  const left = 56;
  const bottom = height - 18;
  const y = linear([0, Math.max(1, top)], [bottom, 8]);
  const step = (width - left - 4) / Math.max(1, count);
  for (const t of ticks(0, Math.max(1, top), 3)) {
    svg.append(node('line', { class: 'axis', x1: left, x2: width, y1: y(t), y2: y(t) }));
    svg.append(node('text', { x: left - 4, y: y(t) + 3, 'text-anchor': 'end' }, format(t)));
  }
  return { svg, y, bottom, x: (i) => left + i * step + 1, width: Math.max(1, step - 2) };
}

/** An SVG bar chart of `values` with a title for each bar from `label(i)`. */
export function bars(values, label, { width = 600, height = 180, format = String } = {}) {
  const { svg, y, bottom, x, width: barWidth } = columns(values.length, Math.max(...values, 1), { width, height, format });
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

/** Columns of stacked `parts` per item of `series` ([{x, parts: {label: value}}]). */
export function stackedColumns(series, label, { width = 800, height = 180, format = String } = {}) {
  const totals = series.map((s) => Object.values(s.parts).reduce((a, b) => a + b, 0));
  const { svg, y, x, width: barWidth } = columns(series.length, Math.max(1, ...totals), { width, height, format });
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
