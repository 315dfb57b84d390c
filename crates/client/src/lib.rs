//! A viewer's side of a run (zellij's client): its link to a run — a socket, or a run that is
//! over played from its folder ([`link`]) —, how a run is reached ([`open`]), and what following
//! runs from their folders delivers ([`follow`]). It links neither the trainer nor the store: what
//! only the store can read comes through [`open::RunArchive`] and the catalog's follower.

pub mod follow;
pub mod link;
pub mod open;
