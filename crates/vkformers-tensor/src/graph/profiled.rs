//! Profiling one piece of work on a [`Graph`]: what dispatches a closure records (tests count
//! the casts a change leaves, the kernels a fusion removes).

use vkformers_vk::Result;

use super::Graph;
use crate::profile::Profile;

impl Graph<'_> {
    /// Runs `f` with profiling on and returns the kernels it dispatched with what it returned.
    /// Work recorded before is submitted first (its batch was opened without timestamps);
    /// profiling is off again afterwards, also when `f` fails.
    pub fn profiled<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<(Profile, R)> {
        self.sync()?;
        self.set_profiling(true);
        let out = f().and_then(|out| Ok((self.take_profile()?.expect("profiling is on"), out)));
        self.set_profiling(false);
        out
    }
}
