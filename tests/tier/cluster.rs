//! A three-node Garage cluster with replication factor 3 under the tier: one node lost,
//! every tiered record still reads byte-exact; two lost, reads of uncached tiered records
//! fail with the remote named (and nothing local is lost); the nodes back, reads come back.

use halflife::ErrorKind;

use super::library::{check_all_readable, fill, store_with, tier_all};
use crate::common::garage::{Garage, garage};

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn tiered_records_survive_the_loss_of_one_node_of_three() {
    let bin = garage();
    let mut garage = Garage::cluster(&bin, 3);
    let dir = tempfile::tempdir().unwrap();
    let settings = garage.settings("cold", "cluster");
    {
        let store = store_with(dir.path(), settings.clone(), |_| {});
        fill(&store, 200, 40);
        let stats = tier_all(&store, u64::MAX);
        assert_eq!((stats.blocks, stats.failed), (4, 0), "{stats:?}");
    }

    // One node of three lost (not the one the store talks to).
    garage.nodes[1].stop();
    {
        // A store opened now has nothing cached: every read fetches.
        let store = store_with(dir.path(), settings.clone(), |_| {});
        check_all_readable(&store, 200);
    }

    // A second node lost: the objects have no quorum. Uncached tiered reads fail with the
    // remote named; the local records (the open block) still read.
    garage.nodes[2].stop();
    {
        let store = store_with(dir.path(), settings.clone(), |_| {});
        let bucket = store.bucket("b").unwrap();
        let e = bucket.read("e", Some(3)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.message().contains("remote 'cold'"), "{e}");
        let local = bucket.read("e", Some(200)).unwrap();
        assert_eq!(
            local.payload.unwrap().as_slice(),
            super::library::payload(200)
        );
    }

    // Both back: everything reads again.
    garage.nodes[1].start();
    garage.nodes[2].start();
    let store = store_with(dir.path(), settings, |_| {});
    // The restarted nodes find their peers again on Garage's own schedule (its reconnect
    // backoff): a minute is the last guard here, not the 10 s of local work.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Err(e) = store.bucket("b").unwrap().read("e", Some(3)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster never answered again: {e}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    check_all_readable(&store, 200);
}
