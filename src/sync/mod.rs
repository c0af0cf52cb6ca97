//! Synchronisation modes (BSP, ASP, SSP, GSSP, allreduce) as transport-free logic.
//!
//! This folder will hold the server and worker loops of each mode; [`staleness`] is the SSP
//! clock bookkeeping they share.

pub mod staleness;
