//! Bad values as messages quote them: bounded in length and in double quotes, so that a huge
//! or binary value never floods a result. Used by the argument checks and the results alike;
//! the one definition is the PVE client's (`pve::encode`), so a value reads the same in a
//! message from either layer.

pub use crate::pve::encode::{bounded, quote};
