//! Synchronisation modes: the parameter-server update rule ([`ps`]) and its SSP clocks
//! ([`staleness`]) and the inter-group mailboxes' format ([`mailbox`]) are pure logic; [`server`], [`worker`], [`allreduce`] and [`gssp`] are
//! the loops over the comm layer; [`run`] assigns roles and writes the results.

pub mod allreduce;
pub mod gssp;
pub mod mailbox;
pub mod ps;
pub mod run;
pub mod server;
pub mod staleness;
pub mod worker;
