//! A run: [`run`] sets it up ([`setup`], with gssp's [`profiling`]) and dispatches each
//! rank to its role: [`worker`] (or, in async-localsgd, [`local_worker`]); [`group_server`] (the single-server baselines and every
//! gssp group server: the [`server`] loop, the inter-group [`exchange`] and the
//! [`regrouper`], through [`peers`]); the [`collective`] modes; or, in one process,
//! [`single`] ([`balancer`] cuts the collective modes' batches by speed). A worker and its
//! server talk in [`messages`]. [`finish`] evaluates and writes the summary; [`saver`] writes and restores
//! the roles' checkpoints; [`faults`] are what tests inject.

pub mod balancer;
pub mod collective;
pub mod exchange;
pub mod faults;
pub mod finish;
pub mod group_server;
pub mod local_worker;
pub mod messages;
pub mod peers;
pub mod profiling;
pub mod regrouper;
pub mod run;
pub mod saver;
pub mod server;
pub mod setup;
pub mod shard_links;
pub mod shard_meetings;
pub mod single;
pub mod worker;
