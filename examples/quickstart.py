import asyncio, json, os, time, urllib.request
from reduct import Client, BucketSettings, LifecycleSettings, LifecycleType
from reduct.error import ReductError

URL = os.environ.get("HALFLIFE_URL", "http://127.0.0.1:8383")
TOKEN = os.environ.get("RS_API_TOKEN")  # unset: a server without authentication

def api(method, path):  # halflife's own endpoints, which reduct-py does not know
    request = urllib.request.Request(f"{URL}/api/v1/{path}", method=method)
    if TOKEN:
        request.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(request) as answer:
        return json.loads(answer.read() or "null")

async def main():
    async with Client(URL, api_token=TOKEN) as client:
        bucket = await client.create_bucket("cams", BucketSettings(max_block_records=256), exist_ok=True)
        eight_days_ago = int((time.time() - 8 * 86400) * 1_000_000)  # a new instant each run
        await bucket.write("cam/front", b"<jpeg bytes>" * 100, timestamp=eight_days_ago,
                           labels={"exposure_ms": "10"}, content_type="image/jpeg")
        async for record in bucket.query("cam/*", when={"&exposure_ms": {"$lt": 20}}):
            print(record.entry, record.timestamp, len(await record.read_all()))
        policy = LifecycleSettings(type=LifecycleType.COMPRESS, bucket="cams", older_than="7d", interval="1h")
        try:
            await client.create_lifecycle("old-frames", policy)
        except ReductError as e:
            if e.status_code != 409:  # it exists: a second run of this script
                raise
            await client.update_lifecycle("old-frames", policy)
        # Its first run is an interval away: run it now (ours), and show its event.
        runs = api("GET", "lifecycles/old-frames")["info"]["total_runs"]
        api("POST", "lifecycles/old-frames/run")
        while (info := api("GET", "lifecycles/old-frames")["info"])["total_runs"] == runs:
            await asyncio.sleep(0.1)
        print("run:", json.dumps(info["last_event"]))
        events = await client.get_bucket("$system")  # the event trail of every policy
        async for event in events.query("lifecycle/**"):
            print(event.entry, event.labels, await event.read_all())

asyncio.run(main())
