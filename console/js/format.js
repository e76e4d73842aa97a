// Formatting of what the API returns: sizes, timestamps (microseconds), durations, and
// the record headers of batched reads. Pure functions, unit-tested with Node.

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];

/** Bytes as a short decimal size: 1234567 → "1.2 MB". */
export function bytes(n) {
  let value = Number(n) || 0;
  let unit = 0;
  while (Math.abs(value) >= 1000 && unit < UNITS.length - 1) {
    value /= 1000;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** A count with thousands separators: 1234567 → "1,234,567". */
export function count(n) {
  return (Number(n) || 0).toLocaleString('en-US');
}

/** A timestamp in microseconds since the epoch as UTC "YYYY-MM-DD HH:MM:SS.ffffff". */
export function timestamp(us) {
  if (us === undefined || us === null || us === '') return '—';
  const big = BigInt(us);
  const ms = Number(big / 1000n);
  // An empty store or bucket answers a placeholder no date can show.
  if (!(ms >= 0 && ms <= 8.64e15)) return '—';
  const micros = Number(big % 1000000n).toString().padStart(6, '0');
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}.${micros}`;
}

/**
 * A timestamp in microseconds as its UTC date and time to the second
 * (["YYYY-MM-DD", "HH:MM:SS"]), or null when there is none to show.
 */
export function dateAndTime(us) {
  const exact = timestamp(us);
  return exact === '—' ? null : [exact.slice(0, 10), exact.slice(11, 19)];
}

/** A timestamp in microseconds as milliseconds since the epoch (a chart's instant). */
export function millis(us) {
  return Number(BigInt(us) / 1000n);
}

/** A span in microseconds for people: "20 µs", "250 ms", "45s", "1h 30m", "2d 4h". */
export function span(us) {
  const n = Number(us) || 0;
  if (n < 1000) return `${Math.round(n)} µs`;
  if (n < 1e6) return `${Math.round(n / 1000)} ms`;
  return duration(n / 1e6);
}

/** An RFC 3339 time as "YYYY-MM-DD HH:MM:SS UTC" ('—' when absent). */
export function isoTime(text) {
  if (!text) return '—';
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(text);
  return m ? `${m[1]} ${m[2]} UTC` : String(text);
}

/** Seconds as a short duration: 93784 → "1d 2h 3m". */
export function duration(seconds) {
  let s = Math.max(0, Math.floor(Number(seconds) || 0));
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60]]) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  if (parts.length === 0) parts.push(`${s}s`);
  return parts.slice(0, 3).join(' ');
}

/**
 * Parses the value of an `x-reduct-time-<ts>` header of a batched read,
 * `<len>,<content-type>[,<k>=<v>…]` (a value holding a comma is quoted), into
 * `{size, contentType, labels}`.
 */
export function recordHeader(value) {
  const fields = [];
  let current = '';
  let quoted = false;
  for (const ch of value) {
    if (ch === '"') {
      quoted = !quoted;
    } else if (ch === ',' && !quoted) {
      fields.push(current);
      current = '';
    } else {
      current += ch;
    }
  }
  fields.push(current);
  const [size, contentType, ...rest] = fields;
  const labels = {};
  for (const pair of rest) {
    const at = pair.indexOf('=');
    if (at > 0) labels[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return { size: Number(size) || 0, contentType: contentType || '', labels };
}

/**
 * Raster image types a browser only ever draws: an image of one of these opened on its
 * own is a picture, never a document. SVG is not among them (it can carry script), so an
 * SVG record shows as its source text.
 */
const RASTER_IMAGES = new Set([
  'image/png', 'image/jpeg', 'image/jpg', 'image/gif', 'image/webp', 'image/avif', 'image/bmp',
  'image/x-icon', 'image/vnd.microsoft.icon',
]);

/** How a record's payload is shown: 'image', 'json', 'text' or 'binary'. */
export function previewKind(contentType) {
  const type = (contentType || '').toLowerCase().split(';')[0].trim();
  if (RASTER_IMAGES.has(type)) return 'image';
  if (type === 'application/json' || type.endsWith('+json')) return 'json';
  if (type.startsWith('text/') || type === 'application/xml' || type.endsWith('+xml')
    || type === 'application/x-ndjson' || type === 'application/javascript') {
    return 'text';
  }
  return 'binary';
}

/** File name extensions of the content types records commonly have. */
const EXTENSIONS = {
  'image/png': 'png', 'image/jpeg': 'jpg', 'image/gif': 'gif', 'image/webp': 'webp',
  'image/avif': 'avif', 'image/bmp': 'bmp', 'image/svg+xml': 'svg', 'application/json': 'json',
  'text/plain': 'txt', 'text/csv': 'csv', 'text/html': 'html', 'application/xml': 'xml',
  'text/xml': 'xml', 'application/x-ndjson': 'ndjson', 'application/pdf': 'pdf',
  'video/mp4': 'mp4', 'application/zip': 'zip', 'application/gzip': 'gz',
};

/**
 * The file name a record downloads under: its entry's last segment and its timestamp,
 * with the extension of its content type ('.bin' when unknown), safe on any file system.
 */
export function downloadName(entry, ts, contentType) {
  const type = (contentType || '').toLowerCase().split(';')[0].trim();
  const base = String(entry || 'record').split('/').filter(Boolean).pop() || 'record';
  const safe = base.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '_');
  return `${safe}-${ts}.${EXTENSIONS[type] || 'bin'}`;
}

/**
 * The type a download's `blob:` URL is given: one no browser renders, whatever the
 * record's own type, so opening the URL in any way (a click, a new tab, a pasted address)
 * saves the bytes instead of running them as a page of the console's origin.
 */
export const DOWNLOAD_TYPE = 'application/octet-stream';

/** The first `limit` bytes of `data` (a Uint8Array) as a hex dump, 16 bytes a line. */
export function hexDump(data, limit = 512) {
  const lines = [];
  const end = Math.min(data.length, limit);
  for (let offset = 0; offset < end; offset += 16) {
    const row = Array.from(data.slice(offset, Math.min(offset + 16, end)));
    const hex = row.map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const text = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${offset.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${text}`);
  }
  if (data.length > end) lines.push(`… ${data.length - end} more bytes`);
  return lines.join('\n');
}

/** Microseconds since the epoch as a `datetime-local` input's value, in UTC ('' when none). */
export function inputTime(us) {
  if (us === undefined || us === null || us === '') return '';
  const ms = Number(BigInt(us) / 1000n);
  if (!Number.isFinite(ms) || ms > 8.64e15) return '';
  return new Date(ms).toISOString().slice(0, 19);
}

/** A `datetime-local` input's value, read as UTC, in microseconds (a string; '' when empty or invalid). */
export function fromInputTime(text) {
  if (!text) return '';
  const ms = Date.parse(`${text.length === 16 ? `${text}:00` : text}Z`);
  return Number.isFinite(ms) && ms >= 0 ? (BigInt(ms) * 1000n).toString() : '';
}

/** A lifecycle policy's state in words, from its info: a run in progress, caught up,
 * catching up on a backlog it names, or no run yet. "Catching up" only ever stands
 * beside records still waiting. */
export function policyState(info) {
  if (info.running_now) return 'running';
  if (info.caught_up === true) return 'caught up';
  if (info.caught_up === false) {
    const waiting = info.backlog_records || 0;
    return waiting > 0 ? `catching up (${count(waiting)} records)` : 'nothing waiting';
  }
  if (info.last_status === 'error') return 'last run failed';
  return info.total_runs ? 'no result kept' : 'not run yet';
}
