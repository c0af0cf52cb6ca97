//! The protocol's pure logic, without MPI: the parameter server's update rule
//! ([`param_server`]) and its SSP clocks ([`ssp_clock`]), the inter-group mailboxes' format
//! ([`mailbox`]), which rank does what ([`layout`]), grouping workers by speed
//! ([`grouping`]), which node each rank sits on ([`placement`]), regroup decisions
//! ([`regroup`]), the timing cost model both predict
//! with ([`costmodel`]), batches in proportion to speed ([`balance`]), and the messages
//! between a worker and its server ([`wire`]).

pub mod balance;
pub mod costmodel;
pub mod grouping;
pub mod layout;
pub mod mailbox;
pub mod param_server;
pub mod placement;
pub mod regroup;
pub mod ssp_clock;
pub mod wire;
