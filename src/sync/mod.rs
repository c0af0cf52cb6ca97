//! Synchronisation modes: the parameter-server update rule ([`ps`]) and its SSP clocks
//! ([`staleness`]), the inter-group mailboxes' format ([`mailbox`]) and the ranks' roles
//! ([`layout`]) are pure logic; [`server`], [`worker`], [`allreduce`], [`localsgd`],
//! [`gssp`] and [`regroup`] are the loops over the comm layer; [`run`] assigns roles and
//! writes the results.

pub mod allreduce;
pub mod checkpoint;
pub mod gssp;
pub mod layout;
pub mod localsgd;
pub mod mailbox;
pub mod ps;
pub mod regroup;
pub mod run;
pub mod server;
pub mod staleness;
pub mod worker;
