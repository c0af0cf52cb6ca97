//! A run: [`run`] sets it up and dispatches each rank to its role's loop: [`worker`],
//! [`server`] (the single-server baselines and every gssp group server, with its
//! inter-group [`exchange`] and [`regrouper`]), the [`collective`] modes, or [`single`].
//! [`saver`] writes and restores the roles' checkpoints.

pub mod collective;
pub mod exchange;
pub mod peers;
pub mod profiling;
pub mod regrouper;
pub mod run;
pub mod saver;
pub mod server;
pub mod single;
pub mod worker;
