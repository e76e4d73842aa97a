//! Open connections per client address, so one client cannot take every connection the
//! server keeps (`--http-max-connections-per-client`). Trusted proxies are not counted:
//! every client behind one shares its address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Whether an address is exempt from the per-client cap (a trusted proxy).
pub type Exempt = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// The open connections of each client address.
pub struct ClientCounts {
    open: Mutex<HashMap<IpAddr, usize>>,
    cap: usize,
    exempt: Exempt,
}

/// One counted connection: dropping it (with its connection) gives the slot back.
pub struct ClientSlot {
    ip: IpAddr,
    counts: Arc<ClientCounts>,
}

impl ClientCounts {
    /// Counts at most `cap` connections per address, except the `exempt` ones.
    pub fn new(cap: usize, exempt: Exempt) -> Arc<ClientCounts> {
        Arc::new(ClientCounts {
            open: Mutex::new(HashMap::new()),
            cap,
            exempt,
        })
    }

    /// Takes a slot for a new connection from `ip`: `Ok(None)` for an exempt address,
    /// `Err(open)` when the address already holds the most it may.
    pub fn claim(self: &Arc<Self>, ip: IpAddr) -> Result<Option<ClientSlot>, usize> {
        if (self.exempt)(ip) {
            return Ok(None);
        }
        let mut open = self.lock();
        let held = open.entry(ip).or_insert(0);
        if *held >= self.cap {
            return Err(*held);
        }
        *held += 1;
        Ok(Some(ClientSlot {
            ip,
            counts: self.clone(),
        }))
    }

    /// The most connections one address may hold.
    pub fn cap(&self) -> usize {
        self.cap
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // The map is a set of counters: one left mid-update by a panic is still usable.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.counts.lock();
        if let Some(held) = open.get_mut(&self.ip) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_cap_and_dropped_slots_come_back() {
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let counts = ClientCounts::new(2, Arc::new(move |ip| ip == proxy));
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        let a = counts.claim(client).unwrap();
        let b = counts.claim(client).unwrap();
        assert!(a.is_some() && b.is_some());
        assert_eq!(counts.claim(client).err(), Some(2));
        // Another address has its own slots; a trusted proxy is not counted.
        assert!(
            counts
                .claim("192.0.2.8".parse().unwrap())
                .unwrap()
                .is_some()
        );
        for _ in 0..10 {
            assert!(counts.claim(proxy).unwrap().is_none());
        }
        drop(a);
        assert!(counts.claim(client).unwrap().is_some());
        drop(b);
        assert!(counts.lock().is_empty(), "empty counters are dropped");
    }
}
