//! Each kind's policy, one file per kind (or kind family), as a [`crate::strategy::Strategy`]: what differs between
//! kinds, while the mechanism they share lives once in [`crate::store`]. (The other kinds still live in
//! `strategy.rs` and move here one at a time.)

pub mod pod;
