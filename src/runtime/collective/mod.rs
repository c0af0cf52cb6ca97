//! The modes without a server: [`allreduce`] (one averaged gradient a step) and
//! [`localsgd`] (local steps, then an average of the replicas).

pub mod allreduce;
pub mod localsgd;
