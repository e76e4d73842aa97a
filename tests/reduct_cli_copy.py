"""Second real client: the official Rust CLI (reduct-cli 0.13.0) copies a bucket of real
fixture data from one halflife server to another, lists and shows it, and every record
arrives byte-identical with the same labels and content type (compared through the HTTP
API with reduct-py).

Usage: SRC_URL=... DST_URL=... HALFLIFE_TOKEN=... REDUCT_CLI=path python tests/reduct_cli_copy.py
Run by .ci/run; exits non-zero with the failing check.
"""

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import zstandard
from reduct import Batch, BucketSettings, Client, RecordBatch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "data-fixtures"
SRC_URL = os.environ["SRC_URL"]
DST_URL = os.environ["DST_URL"]
TOKEN = os.environ.get("HALFLIFE_TOKEN")
CLI = os.environ.get("REDUCT_CLI", "reduct-cli")
BASE_TS = 1_577_836_800_000_000


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def unzstd(name):
    with open(FIXTURES / name, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read()


def records():
    """(entry, ts, payload, content type, labels) from the real fixtures."""
    rows = csv.DictReader(io.StringIO(unzstd("flights.csv.zst").decode()))
    for i, row in enumerate(rows):
        if i >= 2500:
            break
        labels = {"carrier": row["carrier"], "origin": row["origin"]}
        yield "flights", BASE_TS + i * 1000, json.dumps(row).encode(), "application/json", labels
    for i, line in enumerate(unzstd("dpkg.log.zst").decode().splitlines()[:400]):
        kind = line.split(" ")[2] if len(line.split(" ")) > 2 else ""
        yield "logs/dpkg", BASE_TS + i, line.encode(), "text/plain", {"kind": kind, "Mixed-Case": "yes"}
    for i, path in enumerate(sorted((FIXTURES / "images").iterdir())):
        ctype = "image/png" if path.suffix == ".png" else "image/jpeg"
        yield "camera/front", BASE_TS + i * 1_000_000, path.read_bytes(), ctype, {"name": path.name}


async def load(client):
    bucket = await client.create_bucket("fx", BucketSettings(max_block_records=200), exist_ok=True)
    by_entry = {}
    for entry, ts, data, ctype, labels in records():
        by_entry.setdefault(entry, []).append((ts, data, ctype, labels))
    total = 0
    for entry, recs in by_entry.items():
        for start in range(0, len(recs), 80):
            if entry == "flights":
                batch = Batch()  # protocol v1, as reduct-cli writes
                for ts, data, ctype, labels in recs[start:start + 80]:
                    batch.add(ts, data, content_type=ctype, labels=labels)
                errors = await bucket.write_batch(entry, batch)
            else:
                batch = RecordBatch()  # protocol v2
                for ts, data, ctype, labels in recs[start:start + 80]:
                    batch.add(entry, ts, data, content_type=ctype, labels=labels)
                errors = await bucket.write_record_batch(batch)
            if errors:
                raise AssertionError(f"loading {entry} failed: {errors}")
            total += len(recs[start:start + 80])
    return total


async def contents(client):
    bucket = await client.get_bucket("fx")
    out = []
    for entry in sorted(e.name for e in await bucket.get_entry_list()):
        async for record in bucket.query(entry):
            out.append((entry, record.timestamp, record.content_type, dict(record.labels),
                        await record.read_all()))
    return out


def cli(*args, env):
    done = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        print(done.stdout, done.stderr, file=sys.stderr)
    check(done.returncode == 0, f"reduct-cli {' '.join(args)} exits 0")
    return done.stdout


async def main():
    src = Client(SRC_URL, api_token=TOKEN)
    dst = Client(DST_URL, api_token=TOKEN)
    total = await load(src)
    check(total == 2500 + 400 + len(list((FIXTURES / "images").iterdir())), "fixtures loaded")
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=home)
        for alias, url in (("src", SRC_URL), ("dst", DST_URL)):
            args = ["alias", "add", alias, "-L", url]
            if TOKEN:
                args += ["-t", TOKEN]
            cli(*args, env=env)
        # Attachments: written by reduct-py and by reduct-cli, listed, read, removed.
        fx = await src.get_bucket("fx")
        await fx.write_attachments("flights", {"schema": {"cols": 18}, "calib": {"k": 0}})
        await fx.write_attachments("flights", {"calib": {"k": 1}})  # upsert by key
        cli("attachment", "write", "src/fx/flights", "units", '{"dist":"mi"}', env=env)
        cli("attachment", "write", "src/fx/flights", "scratch", '{"tmp":true}', env=env)
        listed = cli("attachment", "ls", "src/fx/flights", env=env)
        check(all(k in listed for k in ("schema", "calib", "units", "scratch")),
              f"reduct-cli attachment ls lists every key ({listed.strip()!r})")
        shown = cli("attachment", "read", "src/fx/flights", "calib", env=env)
        check('"k"' in shown and "1" in shown, f"reduct-cli attachment read shows the upserted value ({shown.strip()!r})")
        cli("attachment", "rm", "src/fx/flights", "scratch", env=env)
        await fx.remove_attachments("flights", ["schema"])
        check(await fx.read_attachments("flights") == {"calib": {"k": 1}, "units": {"dist": "mi"}},
              "reduct-py reads what is left after removals by both clients")
        await fx.write_attachments("flights", {"schema": {"cols": 18}})
        check(await fx.read_attachments("logs/dpkg") == {}, "an entry without attachments has none")
        entries = sorted(e.name for e in await fx.get_entry_list())
        check(not any("$meta" in e for e in entries), f"attachment entries are not listed ({entries})")
        cli("cp", "src/fx", "dst/fx", env=env)
        # `--limit` sends `$limit` in the condition: ten records of each entry.
        cli("cp", "src/fx", "dst/ten", "--limit", "10", env=env)
        listed = cli("bucket", "ls", "src", env=env)
        check("fx" in listed, "reduct-cli bucket ls lists the bucket")
        shown = cli("bucket", "show", "dst/fx", "--full", env=env)
        check("flights" in shown and "camera/front" in shown, "reduct-cli bucket show lists its entries")
    want = await contents(src)
    got = await contents(dst)
    check(len(want) == total, f"the source holds every record ({len(want)})")
    check(len(got) == len(want), f"every record was copied ({len(got)} of {len(want)})")
    differing = [(w[0], w[1]) for w, g in zip(want, got) if w != g]
    check(not differing,
          f"every copied record is byte-identical, with its labels and content type {differing[:5]}")
    copied = await (await dst.get_bucket("fx")).read_attachments("flights")
    check(copied == {"calib": {"k": 1}, "units": {"dist": "mi"}, "schema": {"cols": 18}},
          f"reduct-cli cp copies the live attachments ({copied})")
    ten = await dst.get_bucket("ten")
    counts = {e.name: e.record_count for e in await ten.get_entry_list()}
    source = {e.name: e.record_count for e in await (await src.get_bucket("fx")).get_entry_list()}
    check(counts == {name: min(10, n) for name, n in source.items()},
          f"reduct-cli cp --limit 10 copies ten records of each entry ({counts})")
    print("reduct-cli copy scenario passed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001 - report any failure as a non-zero exit
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
