//! Remote object stores: where the `tier` lifecycle action moves the payload frames of old
//! blocks (see ARCHITECTURE.md, "Tiering"). `settings.rs` configures one, `s3.rs` talks to
//! it, `stub.rs` is what stays on the local disk of a tiered block, `frame_cache.rs` keeps
//! the frames fetched back, `pending.rs` the object operations that must survive a
//! restart, `collector.rs` the thread that carries them out and removes orphans.

pub mod ca;
pub mod s3;
pub mod settings;
