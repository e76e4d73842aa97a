"""Real-client scenario: the unmodified reduct-py 1.21.0 client against a running
`halflife serve` (started by .ci/run with the lifecycle minimums lowered to 1s).

Usage: HALFLIFE_URL=http://127.0.0.1:PORT [HALFLIFE_TOKEN=<RS_API_TOKEN>] python tests/reduct_py_smoke.py
Exits non-zero (with the failing check) on any mismatch.
"""

import asyncio
import json
import os
import sys
import time

import aiohttp

from reduct import (
    Batch,
    BucketSettings,
    RecordBatch,
    Client,
    LifecycleMode,
    LifecycleSettings,
    LifecycleType,
    Permissions,
    ReductError,
)

URL = os.environ.get("HALFLIFE_URL", "http://127.0.0.1:8383")
TOKEN = os.environ.get("HALFLIFE_TOKEN")
BASE_TS = 1_577_836_800_000_000  # 2020-01-01, far older than any older_than below
DEADLINE_S = 60


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


async def count(bucket, entry, **kwargs):
    n = 0
    async for _ in bucket.query(entry, **kwargs):
        n += 1
    return n


async def wait_for(what, probe):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if await probe():
            print(f"ok: {what}")
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for: {what}")


def payload(i):
    # Sensor-like JSON, compressible as real readings are.
    reading = {"sensor": "t-1", "seq": i, "celsius": 20 + (i % 7) / 10, "status": "nominal"}
    return (json.dumps(reading) * 20).encode()


async def tokens(client):
    """A read-only token for one bucket: reads it, gets 403 writing it and on another
    bucket, and stops working the moment it is removed."""
    me = await client.me()
    check(me.name == "init-token" and me.permissions.full_access, "/me names the init token")
    other = await client.create_bucket("smoke-other", exist_ok=True)
    await other.write("e", b"other", timestamp=BASE_TS)
    value = await client.create_token("smoke-reader", Permissions(read=["smoke"]))
    check(value.startswith("smoke-reader-"), "create_token returns the value once")
    reader = Client(URL, api_token=value)
    bucket = await reader.get_bucket("smoke")
    async with bucket.read("sensor", timestamp=BASE_TS + 1000) as record:
        check(await record.read_all() == payload(1), "the read-only token reads its bucket")
    try:
        await bucket.write("sensor", b"nope", timestamp=BASE_TS + 5)
        raise AssertionError("a read-only token must not write")
    except ReductError as e:
        check(e.status_code == 403, "writing with a read-only token is 403")
    try:
        await reader.get_bucket("smoke-other")
        raise AssertionError("another bucket must be refused")
    except ReductError as e:
        check(e.status_code == 403, "another bucket is 403")
    names = [t.name for t in await client.get_token_list()]
    check("smoke-reader" in names and "init-token" in names, "the token list names both")
    await client.remove_token("smoke-reader")
    try:
        await bucket.info()
        raise AssertionError("a removed token must be refused")
    except ReductError as e:
        check(e.status_code == 401, "removal revokes the token at once")
    await other.remove()


async def main():
    client = Client(URL, api_token=TOKEN)
    info = await client.info()
    check(info.version != "", "server info answers")

    bucket = await client.create_bucket(
        "smoke", BucketSettings(max_block_records=100), exist_ok=True
    )
    again = await client.create_bucket("smoke", exist_ok=True)
    check(again.name == "smoke", "create_bucket(exist_ok=True) swallows 409")
    try:
        await client.create_bucket("smoke")
        raise AssertionError("duplicate bucket must fail")
    except ReductError as e:
        check(e.status_code == 409, "duplicate bucket is 409")
    check("smoke" in [b.name for b in await client.list()], "list shows the bucket")

    for i in range(1000):
        labels = {"idx": i, "parity": "even" if i % 2 == 0 else "odd", "csv": "a,b"}
        await bucket.write("sensor", payload(i), timestamp=BASE_TS + i * 1000, labels=labels)
    for i in range(300):
        level = "debug" if i % 3 == 0 else "info"
        await bucket.write(
            "logs/app", f"line {i}".encode(), timestamp=BASE_TS + i, labels={"level": level},
            content_type="text/plain",
        )

    async with bucket.read("sensor", timestamp=BASE_TS + 7000) as record:
        data = await record.read_all()
        check(data == payload(7), "read returns the bytes written")
        check(record.labels == {"idx": "7", "parity": "odd", "csv": "a,b"}, "read returns labels")
    async with bucket.read("logs/app") as record:
        check(record.timestamp == BASE_TS + 299, "read without ts gives the latest record")
        check(record.content_type == "text/plain", "content type kept")

    # A query link: made with the token, opened by anyone without one.
    link = await bucket.create_query_link(
        "sensor", start=BASE_TS, when={"&parity": {"$eq": "odd"}},
        record_entry="sensor", record_timestamp=BASE_TS + 7000, file_name="seven.bin",
    )
    check("/api/v1/links/seven.bin?" in link, f"create_query_link gives a link ({link[:60]}…)")
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(link) as resp:
            check(resp.status == 200 and await resp.read() == payload(7),
                  "the link serves its record without a token")
        async with anonymous.get(link, headers={"Range": "bytes=0-3"}) as resp:
            check(resp.status == 206 and await resp.read() == payload(7)[:4],
                  "the link serves a byte range")

    await bucket.update("sensor", BASE_TS + 7000, {"parity": "", "note": "checked"})
    async with bucket.read("sensor", timestamp=BASE_TS + 7000, head=True) as record:
        check(record.labels == {"idx": "7", "csv": "a,b", "note": "checked"},
              "label update adds, removes, keeps")

    # Awkward values and a long label set round-trip through single reads and batched
    # (v2) query reads; a set no client could read back is refused at write.
    awkward = {
        1: {"eq": "a=b", "mid": 'say "hi"', "comma": "x,y", "tab": "a\tb"},
        2: {f"l{i:03}": "v" * 60 for i in range(100)},
        3: {"eq": "a=b"},
    }
    for ts, labels in awkward.items():
        await bucket.write("awkward", b"x", timestamp=ts, labels=labels)
    for ts, labels in awkward.items():
        async with bucket.read("awkward", timestamp=ts) as record:
            check(record.labels == labels, f"awkward labels of record {ts} read back singly")
    seen = {}
    async for record in bucket.query("awkward"):
        seen[record.timestamp] = record.labels
    check(seen == awkward, "awkward labels read back through batched queries")
    try:
        await bucket.write("awkward", b"x", timestamp=9,
                           labels={f"l{i:03}": "v" for i in range(101)})
        raise AssertionError("101 labels must be refused")
    except ReductError as e:
        check(e.status_code == 422 and "at most 100 labels" in e.message,
              "a label set clients cannot read back is refused with 422")
    # An empty value is kept, as ReductStore keeps it; batch headers cannot tell it from
    # a removal (`k=`), so batched reads show it absent.
    await bucket.write("awkward", b"x", timestamp=10, labels={"empty": "", "k": "v"})
    async with bucket.read("awkward", timestamp=10) as record:
        check(record.labels == {"empty": "", "k": "v"}, "an empty label value reads back singly")
    async for record in bucket.query("awkward", start=10):
        check(record.labels == {"k": "v"}, "an empty label value is absent in batched reads")

    await bucket.remove_record("sensor", BASE_TS + 999_000)
    try:
        await bucket.read("sensor", timestamp=BASE_TS + 999_000).__aenter__()
        raise AssertionError("removed record must be gone")
    except ReductError as e:
        check(e.status_code == 404, "removed record is 404")

    entries = {e.name: e for e in await bucket.get_entry_list()}
    check(entries["sensor"].record_count == 999, "entry list counts records")
    check(entries["logs/app"].record_count == 300, "nested entry listed")

    n = 0
    async for record in bucket.query("sensor"):
        body = await record.read_all()
        check_ok = body == payload((record.timestamp - BASE_TS) // 1000)
        if not check_ok:
            raise AssertionError(f"query payload mismatch at {record.timestamp}")
        n += 1
    check(n == 999, "query returns every record with its bytes (85-record batches)")
    if TOKEN:
        await tokens(client)

    even = await count(bucket, "sensor", when={"&parity": {"$eq": "even"}})
    check(even == 500, "query with when filters by label")
    ranged = await count(bucket, "sensor", start=BASE_TS, stop=BASE_TS + 100_000)
    check(ranged == 100, "query honours start/stop")

    removed = await bucket.remove_query("sensor", when={"&idx": {"$gte": 990}})
    check(removed == 9, "remove_query removes what matches")
    check(await count(bucket, "sensor") == 990, "records gone after remove_query")

    # Multi-entry batched write (with a duplicate reported per record) and removal.
    batch = RecordBatch()
    for i in range(10):
        batch.add("batch/a", BASE_TS + i, f"a{i}".encode(), labels={"n": str(i), "csv": "x,y"})
        batch.add("batch/b", BASE_TS + i, f"b{i}".encode(), content_type="text/plain")
    batch.add("sensor", BASE_TS, b"duplicate")
    errors = await bucket.write_record_batch(batch)
    check(list(errors.get("sensor", {}).keys()) == [BASE_TS] and errors["sensor"][BASE_TS].status_code == 409,
          "batched write reports the duplicate record")
    check(len(errors) == 1, "the other batched records were written")
    async with bucket.read("batch/a", timestamp=BASE_TS + 3) as record:
        check(await record.read_all() == b"a3" and record.labels == {"n": "3", "csv": "x,y"},
              "batched record reads back with its labels")
    # The single-entry batch calls (protocol v1): write, update labels, remove. (reduct-py
    # quotes a label only when its name has a comma, so values here have none.)
    v1 = Batch()
    for i in range(20):
        v1.add(BASE_TS + i, f"v1-{i}".encode(), content_type="text/csv",
               labels={"n": str(i), "Case": "Kept", "q": "a b"})
    errors = await bucket.write_batch("v1/a", v1)
    check(errors == {}, f"write_batch stores every record ({errors})")
    dup = Batch()
    dup.add(BASE_TS + 3, b"again")
    dup.add(BASE_TS + 50, b"new")
    errors = await bucket.write_batch("v1/a", dup)
    check(list(errors.keys()) == [BASE_TS + 3] and errors[BASE_TS + 3].status_code == 409,
          "write_batch reports the duplicate per record")
    async with bucket.read("v1/a", timestamp=BASE_TS + 4) as record:
        check(await record.read_all() == b"v1-4" and record.content_type == "text/csv"
              and record.labels == {"n": "4", "Case": "Kept", "q": "a b"},
              "a v1 batch record reads back with type and labels")
    updates = Batch()
    updates.add(BASE_TS + 4, labels={"n": "", "checked": "yes"})
    updates.add(BASE_TS + 999, labels={"x": "1"})
    errors = await bucket.update_batch("v1/a", updates)
    check(list(errors.keys()) == [BASE_TS + 999] and errors[BASE_TS + 999].status_code == 404,
          "update_batch reports a missing record")
    async with bucket.read("v1/a", timestamp=BASE_TS + 4, head=True) as record:
        check(record.labels == {"Case": "Kept", "q": "a b", "checked": "yes"},
              "update_batch sets and removes labels")
    doomed = Batch()
    doomed.add(BASE_TS + 5)
    doomed.add(BASE_TS + 6)
    errors = await bucket.remove_batch("v1/a", doomed)
    check(errors == {} and await count(bucket, "v1/a") == 19,
          "remove_batch removes the listed records")
    # Multi-entry label updates: reduct-py sends deltas against the previous record.
    multi = RecordBatch()
    multi.add("v1/a", BASE_TS + 1, labels={"n": "one"})
    multi.add("v1/a", BASE_TS + 2, labels={"m": "two"})
    multi.add("sensor", BASE_TS + 8000, labels={"note": "multi"})
    errors = await bucket.update_record_batch(multi)
    check(errors == {}, f"update_record_batch updates every record ({errors})")
    async with bucket.read("v1/a", timestamp=BASE_TS + 1, head=True) as record:
        check(record.labels["n"] == "one", "update_record_batch sets a label")
    async with bucket.read("v1/a", timestamp=BASE_TS + 2, head=True) as record:
        check(record.labels.get("m") == "two" and "n" not in record.labels,
              "update_record_batch applies reduct-py's deltas as ReductStore does")
    async with bucket.read("sensor", timestamp=BASE_TS + 8000, head=True) as record:
        check(record.labels.get("note") == "multi", "update_record_batch reaches a second entry")
    await bucket.remove_entry("v1/a")

    # A continuous query: subscribe() sees records written after it started, by a
    # concurrent writer pausing between writes.
    live_ts = BASE_TS + 10_000_000
    await bucket.write("live", b"first", timestamp=live_ts)

    async def live_writer():
        await asyncio.sleep(0.5)
        for i in range(1, 6):
            await bucket.write("live", f"live {i}".encode(), timestamp=live_ts + i)
            await asyncio.sleep(0.3)

    seen = []

    async def consume():
        async for record in bucket.subscribe("live", start=live_ts, poll_interval=1):
            seen.append(await record.read_all())
            if len(seen) == 6:
                return

    writer_task = asyncio.create_task(live_writer())
    await asyncio.wait_for(consume(), timeout=DEADLINE_S)
    await writer_task
    check(seen == [b"first"] + [f"live {i}".encode() for i in range(1, 6)],
          "subscribe() yields the records written after it started, once, in order")
    await bucket.remove_entry("live")

    # A script that computes between writes blocks its event loop: the kept-alive
    # connection idles for 7 s and the next batch must still go through on it.
    first = RecordBatch()
    first.add("pause", BASE_TS, b"before the pause")
    check(await bucket.write_record_batch(first) == {}, "batch before a 7 s pause")
    time.sleep(7)
    second = RecordBatch()
    second.add("pause", BASE_TS + 1, b"after the pause")
    check(await bucket.write_record_batch(second) == {}, "batch after a 7 s pause")
    check(await count(bucket, "pause") == 2, "both batches around the pause stored")
    removal = RecordBatch()
    for i in range(5):
        removal.add("batch/a", BASE_TS + i)
    removal.add("batch/b", BASE_TS + 99)
    errors = await bucket.remove_record_batch(removal)
    check(list(errors.get("batch/b", {}).keys()) == [BASE_TS + 99], "batched removal reports the missing record")
    check(await count(bucket, "batch/a") == 5, "batched removal removed the records")
    await bucket.remove_entry("batch")

    # Out-of-order batches: 600 records in a scrambled order (7 is prime to 600), 80 per
    # batch, into small blocks, so belated records seal into overlapping blocks; every
    # record is stored once and queries return them in timestamp order.
    await client.create_bucket("smoke-ooo", BucketSettings(max_block_records=40), exist_ok=True)
    ooo = await client.get_bucket("smoke-ooo")
    order = [(i * 7) % 600 for i in range(600)]
    for start in range(0, 600, 80):
        batch = RecordBatch()
        for i in order[start:start + 80]:
            batch.add("ooo", BASE_TS + i * 1000, f"r{i}".encode(), labels={"i": str(i)})
        errors = await ooo.write_record_batch(batch)
        check(not errors, f"scrambled batch at {start} written")
    stamps = [record.timestamp async for record in ooo.query("ooo")]
    check(stamps == [BASE_TS + i * 1000 for i in range(600)], "scrambled writes query back in order")
    async with ooo.read("ooo", timestamp=BASE_TS + 313_000) as record:
        check(await record.read_all() == b"r313" and record.labels == {"i": "313"},
              "a belated record reads back by timestamp")
    again = RecordBatch()
    again.add("ooo", BASE_TS + 5_000, b"again")
    errors = await ooo.write_record_batch(again)
    check(errors.get("ooo", {}).get(BASE_TS + 5_000) is not None, "a duplicate among overlapping blocks is refused")
    await ooo.remove()

    # Two entries with interleaved timestamps, queried together: merged in time, and each
    # payload paired with its own header (reduct-py pairs in (delta, entry) order; no
    # batch of ours mixes entries, so its pairing is right too).
    await client.create_bucket("smoke-mix", exist_ok=True)
    mix = await client.get_bucket("smoke-mix")
    batch = RecordBatch()
    for i in range(200):
        entry = "cam" if i % 2 == 0 else "lidar"
        batch.add(entry, BASE_TS + i, f"{entry}{i}".encode(), labels={"i": str(i)})
    check(await mix.write_record_batch(batch) == {}, "interleaved entries written")
    got = []
    async for record in mix.query(["cam", "lidar"]):
        got.append((record.entry, record.timestamp, await record.read_all()))
    check([ts for _, ts, _ in got] == [BASE_TS + i for i in range(200)],
          "a query over two entries comes back in time order")
    wrong = [(e, ts, data) for e, ts, data in got if data != f"{e}{ts - BASE_TS}".encode()]
    check(not wrong, f"every payload is its own record's ({wrong[:3]})")
    limited = [r.timestamp async for r in mix.query(["cam", "lidar"], when={"$limit": 3})]
    check(len(limited) == 6, "$limit counts per entry")
    await mix.remove()

    # Lifecycle policies: minimum interval lowered to 1s by the server's environment.
    await client.create_lifecycle(
        "drop-debug",
        LifecycleSettings(
            type=LifecycleType.DELETE, bucket="smoke", entries=["logs/*"], older_than="1h",
            interval="1s", when={"&level": {"$eq": "debug"}},
        ),
    )
    before = {e.name: e.size for e in await bucket.get_entry_list()}["sensor"]
    await client.create_lifecycle(
        "squeeze",
        LifecycleSettings(type=LifecycleType.COMPRESS, bucket="smoke", entries=["sensor"],
                          older_than="1h", mode=LifecycleMode.DISABLED),
    )
    names = {lc.name for lc in await client.get_lifecycles()}
    check({"drop-debug", "squeeze"} <= names, "lifecycles listed")
    detail = await client.get_lifecycle_detail("squeeze")
    check(detail.settings.interval == "3600s", "interval null means the default")
    check(detail.info.mode == LifecycleMode.DISABLED, "mode stored")
    await client.update_lifecycle(
        "squeeze",
        LifecycleSettings(type=LifecycleType.COMPRESS, bucket="smoke", entries=["sensor"],
                          older_than="1h", interval="1s", mode=LifecycleMode.DISABLED),
    )
    await client.set_lifecycle_mode("squeeze", LifecycleMode.ENABLED)
    detail = await client.get_lifecycle_detail("squeeze")
    check(detail.info.mode == LifecycleMode.ENABLED and detail.settings.interval == "1s",
          "update and set_lifecycle_mode applied")
    try:
        await client.create_lifecycle(
            "bad", LifecycleSettings(bucket="nope", older_than="1h", interval="1s"))
        raise AssertionError("policy on a missing bucket must fail")
    except ReductError as e:
        check(e.status_code == 404, "policy on a missing bucket is 404")

    async def debug_gone():
        return await count(bucket, "logs/app", when={"&level": {"$eq": "debug"}}) == 0

    await wait_for("delete policy removed the debug lines", debug_gone)
    check(await count(bucket, "logs/app") == 200, "info lines kept")

    async def compressed():
        size = {e.name: e.size for e in await bucket.get_entry_list()}["sensor"]
        return size < before / 2

    await wait_for("compress policy shrank the sensor entry", compressed)
    n = 0
    async for record in bucket.query("sensor"):
        if await record.read_all() != payload((record.timestamp - BASE_TS) // 1000):
            raise AssertionError("payload changed by compression")
        n += 1
    check(n == 990, "every record reads back intact after compression")

    system = await client.get_bucket("$system")
    events = []

    async def both_policies_reported():
        # Each run writes its event just after its changes land, so poll for them.
        events.clear()
        async for record in system.query("lifecycle/**"):
            events.append((record.entry, record.labels, json.loads(await record.read_all())))
        return (any(e[0].endswith("/drop-debug") for e in events)
                and any(e[0].endswith("/squeeze") for e in events))

    await wait_for("delete and compress run events readable in $system", both_policies_reported)
    check(all(e[1].get("status") == str(e[2]["status"]) for e in events),
          "events are labelled with their status")
    check(all(isinstance(e[2]["duration"], float) and e[2]["timestamp"] > 0
              and "instance" in e[2] and "message" in e[2] for e in events),
          "events carry ReductStore's fields (duration in seconds)")
    check(any(e[2].get("processed_records", 0) > 0 for e in events
              if e[0].endswith("/squeeze")), "compress event reports its records")

    await client.delete_lifecycle("drop-debug")
    await client.delete_lifecycle("squeeze")
    check(await client.get_lifecycles() == [] or
          all(lc.name not in ("drop-debug", "squeeze") for lc in await client.get_lifecycles()),
          "lifecycles deleted")
    await bucket.remove_entry("logs/app")
    await bucket.remove()
    check("smoke" not in [b.name for b in await client.list()], "bucket removed")
    print("reduct-py smoke scenario passed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001 - report any failure as a non-zero exit
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
